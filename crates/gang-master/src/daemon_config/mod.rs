//! What the daemon runs with besides the state's config: where it listens, its TLS files,
//! where the state is kept (SQLite or etcd), connection limits, the order tree, browsers.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | `DaemonConfig`: the state's config (`crate::config`) and what the daemon runs with |
//! | `file.rs` | the TOML file's keys (`FileConfig`), every one optional |
//! | `layers.rs` | defaults, file, `GANG_MASTER_*` environment, flags: merged with figment |
//! | `resolve.rs` | the merged keys checked and turned into `DaemonConfig` |

pub mod file;
pub mod layers;
pub mod resolve;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gang_auth::pki::TlsFiles;
use gang_core::Shape;

use crate::config::{Fanout, MasterConfig};
use crate::connections::ConnLimits;

/// Where local clients find the master unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gang/master.sock";
/// The leader's lease in etcd, s: a leader that dies is replaced about this long after
/// (one that stops cleanly gives its lease up, and is replaced at once). Five seconds: a
/// leader whose renewals are late only stops acting until they are answered, but a lease
/// etcd lets end is lost for good, and a loaded host or a slow disk can hold a renewal
/// for seconds; jobs do not notice a failover this long (agents keep their ranks for
/// `agent_lease_ms`). etcd grants at least its own minimum (1.5 election timeouts).
pub const DEFAULT_ETCD_LEASE_S: u32 = 5;
/// One etcd request's deadline, ms (a cluster without quorum answers nothing).
pub const DEFAULT_ETCD_TIMEOUT_MS: u32 = 3000;

/// Everything the master runs with, resolved: the state's config and the daemon's.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// What the state decides with.
    pub master: MasterConfig,
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    /// The SQLite database (unless `etcd`); its directory holds the output logs unless
    /// `output_dir`.
    pub state: PathBuf,
    /// The state in etcd instead (`--state etcd://...`), shared by several masters.
    pub etcd: Option<gang_etcd::Target>,
    /// The leader's lease (s): a dead leader is replaced this long after its last keepalive.
    pub etcd_lease_s: u32,
    /// How long one etcd request may take.
    pub etcd_timeout_ms: u32,
    /// Where per-job output logs go (default: beside the database).
    pub output_dir: Option<PathBuf>,
    pub ready_file: Option<PathBuf>,
    /// Local clients' Unix socket (mode 0666: anyone may connect, and is identified by
    /// the socket's peer credentials).
    pub socket: PathBuf,
    /// The agents' port (mutual TLS).
    pub agent_listen: SocketAddr,
    /// The master's certificate (`master.gang`) and the cluster CA.
    pub tls: TlsFiles,
    /// The key tokens are signed with (made on first start).
    pub token_key: PathBuf,
    /// Connections and streams per listener and per peer, and their deadlines.
    pub connections: ConnLimits,
    /// How launches, signals and slice tables reach many agents (`agents::AgentPool`).
    pub fanout: Fanout,
    /// Origins whose web pages may call the API (CORS on the client port's gRPC-Web).
    pub web_origins: Vec<String>,
    /// Serve the reference portal (`web/portal.rs`) at `/portal/` on the client port.
    pub web_portal: bool,
}

impl DaemonConfig {
    /// Where per-job output logs live: beside the database.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.output_dir {
            return d.clone();
        }
        let mut name = self.state.file_name().unwrap_or_default().to_os_string();
        name.push(".output");
        self.state.with_file_name(name)
    }

    /// A config for tests: everything in the directory of `state`, loopback ports.
    pub fn for_test(mesh: Shape, state: PathBuf) -> Self {
        let dir = state.parent().map(Path::to_path_buf).unwrap_or_default();
        let loopback = || "127.0.0.1:0".parse().expect("literal");
        DaemonConfig {
            master: MasterConfig::for_test(mesh, state.clone()),
            socket: dir.join("master.sock"),
            agent_listen: loopback(),
            tls: TlsFiles {
                ca: dir.join("tls/ca.pem"),
                cert: dir.join("tls/master.pem"),
                key: dir.join("tls/master-key.pem"),
            },
            token_key: dir.join("token.key"),
            connections: ConnLimits::default(),
            web_origins: Vec::new(),
            web_portal: false,
            fanout: Fanout::default(),
            listen: loopback(),
            metrics_listen: loopback(),
            state,
            etcd: None,
            etcd_lease_s: DEFAULT_ETCD_LEASE_S,
            etcd_timeout_ms: DEFAULT_ETCD_TIMEOUT_MS,
            output_dir: None,
            ready_file: None,
        }
    }
}

/// A CORS origin as browsers send it: scheme, host and optional port, nothing more.
pub fn check_origin(o: &str) -> Result<(), String> {
    let rest = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"))
        .ok_or_else(|| format!("web.allow_origins: {o:?} must start with https:// or http://"))?;
    let bad = rest.is_empty() || rest.contains(['/', '?', '#', '*', ' ']) || rest.ends_with(':');
    if bad {
        return Err(format!(
            "web.allow_origins: {o:?} is not an origin: scheme://host[:port], no path or wildcard"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_origins_are_origins() {
        assert!(check_origin("https://portal.example").is_ok());
        assert!(check_origin("http://127.0.0.1:8080").is_ok());
        for bad in [
            "portal.example",
            "https://",
            "https://p.example/",
            "https://*.example",
            "https://p:",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }
}
