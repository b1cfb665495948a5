//! The master's configuration in layers, each over the one before: built-in defaults, the
//! TOML file (`--config`), `GANG_MASTER_*` environment variables (`GANG_MASTER_MPL=2`,
//! nested keys with `__`: `GANG_MASTER_LIMITS__MAX_JOB_NODES=8`), then command-line
//! flags. figment merges them; `resolve.rs` checks what comes out.
//!
//! The file is read with `toml` itself first, so that a malformed or misspelt key is
//! reported as before, with its line, naming the file. Repeatable flags add to the file
//! (`--admin` adds admins); every other flag replaces the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::Env;
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

use crate::config::{
    DEFAULT_FANOUT_WIDTH, DEFAULT_HOP_TIMEOUT_MS, DEFAULT_KILL_GRACE_MS, DEFAULT_MPL,
    DEFAULT_QUANTUM_MS, DEFAULT_TABLE_LEAD_MS, DEFAULT_TOKEN_MAX_TTL_S, DEFAULT_TOKEN_TTL_S,
    Limits,
};
use crate::connections::ConnectionsSection;
use crate::daemon_config::file::FileConfig;
use crate::daemon_config::{DEFAULT_ETCD_LEASE_S, DEFAULT_ETCD_TIMEOUT_MS, DEFAULT_SOCKET};

/// Every key after the layers are merged: a value where the default is fixed, an option
/// where it depends on other keys (the liveness periods scale with the mesh) or where
/// there is none (the mesh).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub mesh: Option<String>,
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub agent_listen: SocketAddr,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub output_dir: Option<PathBuf>,
    pub etcd_lease_s: u32,
    pub etcd_timeout_ms: u32,
    pub etcd_ca: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
    pub etcd_trusted_network: bool,
    pub mpl: u32,
    pub quantum_ms: u32,
    pub gang_mode: Option<String>,
    pub on_deadlock: Option<String>,
    pub mpi: Option<String>,
    pub table_lead_ms: u32,
    pub placer: Option<String>,
    pub backfill: String,
    pub queue_order: String,
    pub heartbeat_ms: Option<u32>,
    pub node_timeout_ms: Option<u32>,
    pub idle_heartbeat_ms: Option<u32>,
    pub idle_node_timeout_ms: Option<u32>,
    pub agent_lease_ms: Option<u32>,
    pub adopt_timeout_ms: Option<u32>,
    pub kill_grace_ms: u32,
    pub fanout_width: u32,
    pub fences: String,
    pub relay_hop_timeout_ms: u32,
    pub log_format: String,
    pub admins: Vec<String>,
    pub admin_groups: Vec<String>,
    pub allow_root_jobs: bool,
    pub token_key: Option<PathBuf>,
    pub token_ttl_s: u64,
    pub token_max_ttl_s: u64,
    pub tls: TlsPaths,
    pub limits: Limits,
    pub connections: ConnectionsSection,
    pub web: Web,
}

/// `[tls]`: the cluster CA, the master's certificate and key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `[web]`: origins whose pages may call the API, and the reference portal.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Web {
    pub allow_origins: Vec<String>,
    pub portal: bool,
}

impl Default for Settings {
    fn default() -> Self {
        let addr = |s: &str| s.parse().expect("literal");
        let tls = |name| PathBuf::from("/etc/gang/tls").join(name);
        Settings {
            mesh: None,
            listen: addr("127.0.0.1:7470"),
            metrics_listen: addr("127.0.0.1:7471"),
            agent_listen: addr("127.0.0.1:7472"),
            socket: PathBuf::from(DEFAULT_SOCKET),
            state: PathBuf::from("gang-master.db"),
            output_dir: None,
            etcd_lease_s: DEFAULT_ETCD_LEASE_S,
            etcd_timeout_ms: DEFAULT_ETCD_TIMEOUT_MS,
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_trusted_network: false,
            mpl: DEFAULT_MPL,
            quantum_ms: DEFAULT_QUANTUM_MS,
            gang_mode: None,
            on_deadlock: None,
            mpi: None,
            table_lead_ms: DEFAULT_TABLE_LEAD_MS,
            placer: None,
            backfill: "easy".into(),
            queue_order: "fair-share".into(),
            heartbeat_ms: None,
            node_timeout_ms: None,
            idle_heartbeat_ms: None,
            idle_node_timeout_ms: None,
            agent_lease_ms: None,
            adopt_timeout_ms: None,
            kill_grace_ms: DEFAULT_KILL_GRACE_MS,
            fanout_width: DEFAULT_FANOUT_WIDTH,
            fences: "agents".into(),
            relay_hop_timeout_ms: DEFAULT_HOP_TIMEOUT_MS,
            log_format: "human".into(),
            admins: Vec::new(),
            admin_groups: Vec::new(),
            allow_root_jobs: false,
            token_key: None,
            token_ttl_s: DEFAULT_TOKEN_TTL_S,
            token_max_ttl_s: DEFAULT_TOKEN_MAX_TTL_S,
            tls: TlsPaths {
                ca: tls("ca.pem"),
                cert: tls("master.pem"),
                key: tls("master-key.pem"),
            },
            limits: Limits::default(),
            connections: ConnectionsSection::default(),
            web: Web::default(),
        }
    }
}

/// The layers merged: defaults, the file at `file` (if any), the environment, `flags`.
pub fn merge(file: Option<&Path>, flags: &FileConfig) -> anyhow::Result<Settings> {
    let from_file = match file {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let figment = Figment::new()
        .merge(Layer::of("the built-in defaults", &Settings::default())?)
        .merge(Layer::of("the config file", &from_file)?)
        .merge(
            Env::prefixed("GANG_MASTER_")
                .split("__")
                .map(|k| renamed(k.as_str()).into()),
        )
        // Arrays add up: `--admin` adds to the file's admins.
        .admerge(Layer::of("the command line", flags)?);
    figment
        .extract::<Settings>()
        .map_err(|e| anyhow::anyhow!("configuration: {e}"))
}

/// A key renamed, under its new name (the old is read for one release).
/// Also where a flag's name is not its key's path (`--portal`, `GANG_MASTER_PORTAL`, is
/// `web.portal`). Keys come as the environment spells them (`ALLOCATOR`): figment
/// lowercases them only afterwards.
fn renamed(key: &str) -> String {
    match key.to_ascii_lowercase().as_str() {
        "allocator" => "placer".into(),
        "portal" => "web.portal".into(),
        _ => key.into(),
    }
}

/// One layer: the keys a source sets (keys it leaves out do not hide a layer below).
struct Layer {
    name: &'static str,
    dict: Dict,
}

impl Layer {
    fn of(name: &'static str, keys: &impl Serialize) -> anyhow::Result<Layer> {
        let dict = match set_only(Value::serialize(keys)?) {
            Value::Dict(_, d) => d,
            _ => Dict::new(),
        };
        Ok(Layer { name, dict })
    }
}

/// The value without the keys that are not set (a `None` would hide the layer below).
fn set_only(v: Value) -> Value {
    match v {
        Value::Dict(tag, d) => Value::Dict(
            tag,
            d.into_iter()
                .filter(|(_, v)| !matches!(v, Value::Empty(..)))
                .map(|(k, v)| (k, set_only(v)))
                .collect(),
        ),
        v => v,
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}
