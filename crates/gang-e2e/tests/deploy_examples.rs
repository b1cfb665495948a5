//! deploy/client.toml, the example /etc/gang/client.toml, parses with the loader prun and
//! gangctl use. (The master's and the agent's examples are checked in their own crates;
//! crates/gang-master/tests/deploy.rs makes sure every example in deploy/ is.)

use std::path::Path;

#[test]
fn the_example_client_config_parses() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/client.toml");
    let c = gang_cli::connect::client_config::load(&p).unwrap();
    assert_eq!(c.master.as_deref(), Some("http://master.example:7470"));
}
