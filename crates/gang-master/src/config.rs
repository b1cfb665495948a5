//! Configuration: defaults in code, then a TOML file, then command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gang_core::{AllocatorKind, Backfill, Request, Shape};
use serde::Deserialize;

use gang_core::GangMode;

/// Slices by default: Slurm's gang scheduler also shares a node four ways by default.
pub const DEFAULT_MPL: u32 = 4;
/// The default quantum (see README: gang overhead against quantum).
pub const DEFAULT_QUANTUM_MS: u32 = 50;
pub const DEFAULT_TABLE_LEAD_MS: u32 = 20;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub metrics_listen: Option<SocketAddr>,
    pub mesh: Option<String>,
    pub state: Option<PathBuf>,
    pub mpl: Option<u32>,
    pub allocator: Option<String>,
    pub backfill: Option<String>,
    pub heartbeat_ms: Option<u32>,
    pub node_timeout_ms: Option<u32>,
    pub kill_grace_ms: Option<u32>,
    pub log_format: Option<String>,
    pub quantum_ms: Option<u32>,
    pub gang_mode: Option<String>,
    pub table_lead_ms: Option<u32>,
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }
}

/// Everything the master runs with, resolved.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub mesh: Shape,
    pub state: PathBuf,
    pub mpl: u32,
    pub allocator: AllocatorKind,
    pub backfill: Backfill,
    pub heartbeat_ms: u32,
    /// A node whose agent is silent this long is down and its jobs fail.
    pub node_timeout_ms: u32,
    /// SIGTERM-to-SIGKILL grace when a job is cancelled.
    pub kill_grace_ms: u32,
    pub ready_file: Option<PathBuf>,
    /// Length of a time slot: each row of the slice matrix runs this long in turn.
    pub quantum_ms: u32,
    /// How jobs that do not choose are switched.
    pub gang_mode: GangMode,
    /// How far ahead of its first slot a new slice table is published, so that every
    /// agent has it in time.
    pub table_lead_ms: u32,
}

impl MasterConfig {
    /// Where per-job output logs live: beside the database.
    pub fn state_dir(&self) -> PathBuf {
        let mut name = self.state.file_name().unwrap_or_default().to_os_string();
        name.push(".output");
        self.state.with_file_name(name)
    }

    pub fn for_test(mesh: Shape, state: PathBuf) -> Self {
        MasterConfig {
            listen: "127.0.0.1:0".parse().expect("literal"),
            metrics_listen: "127.0.0.1:0".parse().expect("literal"),
            mesh,
            state,
            mpl: 1,
            allocator: AllocatorKind::AdaptiveScan,
            backfill: Backfill::Easy,
            heartbeat_ms: 200,
            node_timeout_ms: 2000,
            kill_grace_ms: 2000,
            ready_file: None,
            quantum_ms: DEFAULT_QUANTUM_MS,
            gang_mode: GangMode::Stop,
            table_lead_ms: DEFAULT_TABLE_LEAD_MS,
        }
    }
}

pub fn parse_mesh(s: &str) -> Result<Shape, String> {
    match s.parse::<Request>().map_err(|e| e.to_string())? {
        Request::Shape(m) if m.w <= 256 && m.h <= 256 => Ok(m),
        Request::Shape(m) => Err(format!("mesh {m} is larger than 256x256")),
        Request::Nodes(_) => Err(format!("expected the mesh as WxH (e.g. 4x4), got {s:?}")),
    }
}
