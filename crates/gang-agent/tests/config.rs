//! deploy/agent.toml, the example every node's /etc/gang/agent.toml starts from, resolves
//! through the agent's own loader with the values it documents.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use gang_agent::config::FileConfig;
use gang_agent::rt::clock::ClockMode;
use gang_agent::switch::freezer::FreezerSetting;
use gang_agent::{Coord, Flags, LogFormat};

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/agent.toml")
}

#[test]
fn the_example_config_resolves() {
    let path = example();
    let file = FileConfig::load(&path).unwrap();
    // Every key the agent accepts is documented there, ready_file commented out (a
    // launcher's key, not systemd's).
    let shown = format!("{file:?}");
    assert_eq!(
        shown.matches("None").count(),
        1,
        "deploy/agent.toml leaves a key out: {shown}"
    );
    assert!(file.ready_file.is_none());

    let mut flags =
        Flags::try_parse_from(["gang-agent", "--config", path.to_str().unwrap()]).unwrap();
    // The file's master, whatever $GANG_MASTER says where the tests run.
    flags.master = None;
    let cfg = flags.resolve().unwrap();
    assert_eq!(cfg.master, "https://master.example:7472");
    assert_eq!(cfg.coord, Coord { x: 0, y: 0 });
    assert_eq!(cfg.listen, "0.0.0.0:7472".parse().unwrap());
    assert_eq!(cfg.kill_grace, Duration::from_millis(2000));
    assert_eq!(cfg.clock, ClockMode::Probe);
    assert_eq!(cfg.freezer, FreezerSetting::Auto);
    assert_eq!(cfg.rt_priority, 50);
    assert_eq!(cfg.switch_spin, Duration::ZERO);
    assert_eq!(cfg.log_format, LogFormat::Human);
}
