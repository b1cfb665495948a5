//! Many emulated nodes in one process (`--emulate --emulate-nodes WxH`), a test tool for
//! fleets far larger than the machine. Each node is a whole agent as `agent::start` makes
//! it (its own NodeAgent server and port, certificate, registry session, switch thread,
//! outbox), sharing only the process and its runtime; its ranks are played
//! (`emulate/played.rs`). What a node would take of the host is left out: the clock is
//! the host's (they all share it), no thread runs at real-time priority, no rank guard.

use std::path::{Path, PathBuf};

use crate::config::AgentConfig;
use crate::error::Coord;
use crate::rt::clock::ClockMode;

/// The configurations of the `block` (W, H) of nodes from `base.coord`: `{x}` and `{y}` in
/// the certificate and key paths name each node's files.
pub fn node_configs(base: &AgentConfig, block: (u32, u32)) -> Vec<AgentConfig> {
    let (x0, y0) = (base.coord.x, base.coord.y);
    let mut out = Vec::with_capacity((block.0 * block.1) as usize);
    for y in y0..y0 + block.1 {
        for x in x0..x0 + block.0 {
            let mut c = base.clone();
            c.coord = Coord { x, y };
            c.tls.cert = per_node(&base.tls.cert, x, y);
            c.tls.key = per_node(&base.tls.key, x, y);
            c.ready_file = None;
            c.emulate = true;
            c.clock = ClockMode::Host;
            c.rt_priority = 0;
            c.guard_exe = None;
            out.push(c);
        }
    }
    out
}

fn per_node(template: &Path, x: u32, y: u32) -> PathBuf {
    PathBuf::from(
        template
            .to_string_lossy()
            .replace("{x}", &x.to_string())
            .replace("{y}", &y.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_auth::pki::TlsFiles;

    #[test]
    fn each_node_gets_its_own_coordinate_and_files() {
        let mut base = AgentConfig::for_test(
            "https://127.0.0.1:1",
            2,
            5,
            TlsFiles {
                ca: "/p/ca.pem".into(),
                cert: "/p/nodes/node-{x}-{y}.pem".into(),
                key: "/p/nodes/node-{x}-{y}-key.pem".into(),
            },
        );
        base.rt_priority = 50;
        let cfgs = node_configs(&base, (3, 2));
        assert_eq!(cfgs.len(), 6);
        let last = &cfgs[5];
        assert_eq!((last.coord.x, last.coord.y), (4, 6));
        assert_eq!(last.tls.cert, PathBuf::from("/p/nodes/node-4-6.pem"));
        assert_eq!(last.tls.key, PathBuf::from("/p/nodes/node-4-6-key.pem"));
        assert_eq!(last.tls.ca, PathBuf::from("/p/ca.pem"));
        assert!(cfgs.iter().all(|c| c.emulate && c.rt_priority == 0));
        assert!(cfgs.iter().all(|c| c.clock == ClockMode::Host));
    }
}
