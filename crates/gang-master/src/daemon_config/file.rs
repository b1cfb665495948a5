//! The TOML file's keys (`gang-master --config FILE`, `deploy/master.toml` documents each),
//! every one optional. The same shape is each layer of `layers.rs`: the file, the
//! environment and the flags each set some keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::connections::ConnectionsSection;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub metrics_listen: Option<SocketAddr>,
    pub mesh: Option<String>,
    pub state: Option<PathBuf>,
    pub output_dir: Option<PathBuf>,
    pub etcd_lease_s: Option<u32>,
    pub etcd_timeout_ms: Option<u32>,
    pub etcd_ca: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
    pub etcd_trusted_network: Option<bool>,
    pub mpl: Option<u32>,
    /// The placer (adaptive-scan, first-fit, best-fit); `allocator`, its old name, is
    /// read too for one release.
    #[serde(alias = "allocator")]
    pub placer: Option<String>,
    pub backfill: Option<String>,
    pub queue_order: Option<String>,
    pub heartbeat_ms: Option<u32>,
    pub node_timeout_ms: Option<u32>,
    pub idle_heartbeat_ms: Option<u32>,
    pub idle_node_timeout_ms: Option<u32>,
    pub agent_lease_ms: Option<u32>,
    pub adopt_timeout_ms: Option<u32>,
    pub kill_grace_ms: Option<u32>,
    pub log_format: Option<String>,
    pub quantum_ms: Option<u32>,
    pub gang_mode: Option<String>,
    pub on_deadlock: Option<String>,
    pub mpi: Option<String>,
    pub table_lead_ms: Option<u32>,
    pub fanout_width: Option<u32>,
    pub fences: Option<String>,
    pub relay_hop_timeout_ms: Option<u32>,
    /// Local clients: a Unix socket; callers are identified by its peer credentials.
    pub socket: Option<PathBuf>,
    /// Agents: mutual TLS with node certificates.
    pub agent_listen: Option<SocketAddr>,
    pub tls: Option<TlsSection>,
    /// Users who may act on every job and drain or resume nodes (root always may).
    pub admins: Option<Vec<String>>,
    /// Members of these groups are admins too.
    pub admin_groups: Option<Vec<String>>,
    /// Whether jobs may run as root (uid 0).
    pub allow_root_jobs: Option<bool>,
    /// Tokens (`gangctl token`): their signing key, default and longest validity.
    pub token_key: Option<PathBuf>,
    pub token_ttl_s: Option<u64>,
    pub token_max_ttl_s: Option<u64>,
    pub limits: Option<LimitsSection>,
    pub connections: Option<ConnectionsSection>,
    pub web: Option<WebSection>,
}

/// Browsers: gRPC-Web on the client port, and which other origins' pages may call it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    /// Origins (`https://portal.example:8443`) whose pages may call the API from a
    /// browser (CORS); empty: only pages the master serves itself.
    pub allow_origins: Option<Vec<String>>,
    /// Serve the reference portal page at `/portal/` on the client port.
    pub portal: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_request_bytes: Option<usize>,
    pub max_argv_bytes: Option<usize>,
    pub max_env_bytes: Option<usize>,
    pub max_job_nodes: Option<u32>,
    pub max_queued_per_user: Option<usize>,
    pub max_queued_bytes_per_user: Option<u64>,
    pub max_output_bytes: Option<u64>,
    pub max_array_tasks: Option<usize>,
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }
}
