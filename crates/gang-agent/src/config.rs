//! Configuration: defaults in code, then a TOML file (`--config`), then the environment
//! (`GANG_AGENT_*`, and `GANG_MASTER` through its flag) and flags, each layer overriding
//! the one before (merged by `figment` in `layers`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};
use gang_auth::pki::TlsFiles;
use serde::{Deserialize, Serialize};

use crate::error::Coord;
use crate::launch::env_policy::DROPPED_ENV;
use crate::rt::clock::ClockMode;
use crate::switch::RT_PRIORITY;
use crate::switch::freezer::FreezerSetting;

/// SIGTERM-to-SIGKILL grace for jobs the master tells us to drop at registration.
pub const DEFAULT_KILL_GRACE_MS: u32 = 2000;
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// The command line. Every field is optional here so that a flag that was not given
/// does not hide the config file's value; `resolve` applies the defaults.
#[derive(Debug, Default, Parser)]
#[command(
    name = "gang-agent",
    version,
    about = "Gang scheduler node agent: launches this mesh node's ranks for the master."
)]
pub struct Flags {
    /// The master's agent port, e.g. https://master.example:7471 (https:// is added if
    /// missing); several masters sharing their state in etcd, comma-separated (the agent
    /// follows whichever leads).
    #[arg(long, env = "GANG_MASTER", value_name = "URL")]
    pub master: Option<String>,
    /// This node's mesh column.
    #[arg(long, value_name = "N")]
    pub x: Option<u32>,
    /// This node's mesh row.
    #[arg(long, value_name = "N")]
    pub y: Option<u32>,
    /// Where to serve the NodeAgent service [default: 127.0.0.1:0, an ephemeral port].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Once bound, write `grpc=HOST:PORT` here (atomically), for launchers.
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,
    /// The cluster CA's certificate (PEM): peers are verified against it alone.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM), naming node (X,Y): DIR/nodes/node-X-Y.pem of
    /// `gangctl certs init DIR`.
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Let ranks run as root (uid 0) [default: refused].
    #[arg(long, action = ArgAction::SetTrue)]
    pub allow_root: bool,
    /// A test tool for fleets larger than the machine: play ranks instead of running them
    /// (no process is started; see docs/internals/agent.md, "Emulated nodes"). The clock is then
    /// the host's and no thread runs at real-time priority.
    #[arg(long, action = ArgAction::SetTrue)]
    pub emulate: bool,
    /// With --emulate: run the WxH block of nodes starting at (--x, --y) in this one
    /// process; --tls-cert and --tls-key then name each node's files with {x} and {y}
    /// (at most 4096 nodes a process).
    #[arg(long, value_name = "WxH", requires = "emulate", value_parser = parse_block)]
    pub emulate_nodes: Option<(u32, u32)>,
    /// Pass on this variable, which the environment policy drops (repeatable, or
    /// comma-separated).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub env_allow: Vec<String>,
    /// A TOML file with the keys master, x, y, listen, tls_ca, tls_cert, tls_key,
    /// allow_root, env_allow, kill_grace_ms, log_format, clock, clock_probe_max_ms, freezer,
    /// rt_priority, switch_spin_us, msg_dir, spool_dir, output_spool_mb.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on stderr [default: human].
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Grace between SIGTERM and SIGKILL for jobs the master says to drop [default: 2000].
    #[arg(long, value_name = "MS")]
    pub kill_grace_ms: Option<u32>,
    /// The master clock: probe the master (NTP-style), or trust the host clock (chrony,
    /// PTP) [default: probe].
    #[arg(long, value_enum)]
    pub clock: Option<ClockMode>,
    /// With `--clock probe`: the longest period between probes, which doubles from 1 s up
    /// to this while the estimate stays put (at least 1000) [default: 8000].
    #[arg(long, value_name = "MS")]
    pub clock_probe_max_ms: Option<u32>,
    /// The cgroup freezer for FREEZE jobs: auto, off, or a directory in a cgroup
    /// hierarchy [default: auto].
    #[arg(long, value_name = "auto|off|PATH")]
    pub freezer: Option<FreezerSetting>,
    /// SCHED_FIFO priority of the switch thread, 1-99; 0: normal scheduling [default: 50].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=99))]
    pub rt_priority: Option<i32>,
    /// Wake the switch thread this long before each slot boundary and spin to it, trading
    /// CPU for switch latency (at most 5000) [default: 0].
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=5000))]
    pub switch_spin_us: Option<u32>,
    /// Where ranks' messaging-library directories go (control socket, pages), one per rank
    /// under DIR/X-Y/ [default: /run/gang/msg as root, else $TMPDIR/gang-msg-UID].
    #[arg(long, value_name = "DIR")]
    pub msg_dir: Option<PathBuf>,
    /// Where ranks' output is spooled while the master cannot take it, under DIR/X-Y/
    /// [default: /var/spool/gang/output as root, else $TMPDIR/gang-spool-UID].
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// The most output one job may have spooled on this node, in MiB; past it, output is
    /// discarded and the job says how much [default: 256].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=1048576))]
    pub output_spool_mb: Option<u32>,
}

/// The `--config` file, and each layer of settings (`layers`): a key a layer does not
/// set is absent from it, so that the layer below shows through. Unknown keys are errors:
/// a misspelt key silently ignored is a node that registers at the wrong coordinate.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_root: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_allow: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_grace_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_probe_max_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freezer: Option<FreezerSetting>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt_priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_spin_us: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_spool_mb: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment {ENV_PREFIX}*: {0}")]
    Env(String),
    #[error("missing {0}: give it as a flag or in the --config file")]
    Missing(&'static str),
    #[error("rt_priority {0} is out of range (0-99)")]
    RtPriority(i32),
    #[error("switch_spin_us {0} is out of range (0-5000)")]
    SwitchSpin(u32),
    #[error(
        "clock_probe_max_ms {0} is too short: probes start 1000 ms apart, so the longest period is at least 1000"
    )]
    ClockProbeMax(u32),
    #[error("bad master address {address:?}: {message}")]
    Master { address: String, message: String },
    #[error(
        "missing {missing} (flags --tls-ca, --tls-cert, --tls-key, or those keys in the --config file): the agent speaks only mutual TLS. Make the cluster's certificates with `gangctl certs init DIR --mesh WxH` and give this node DIR/ca.pem, DIR/nodes/node-{x}-{y}.pem and DIR/nodes/node-{x}-{y}-key.pem, or bring PEM files of your own CA (see the deploy documentation and the agent README, section TLS)"
    )]
    MissingTls { missing: String, x: u32, y: u32 },
    #[error("env_allow: {name:?} is not a variable the agent drops (it drops {})", DROPPED_ENV.join(", "))]
    EnvAllow { name: String },
}

/// Everything the agent runs with, resolved.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The master's URL, with a scheme.
    pub master: String,
    pub coord: Coord,
    pub listen: SocketAddr,
    pub ready_file: Option<PathBuf>,
    /// The cluster CA, and this node's certificate and key.
    pub tls: TlsFiles,
    /// Whether ranks may run as root.
    pub allow_root: bool,
    /// Ranks are played, not run (`emulate/played.rs`).
    pub emulate: bool,
    /// Variables the environment policy drops that this node passes on all the same.
    pub env_allow: BTreeSet<String>,
    pub kill_grace: Duration,
    pub log_format: LogFormat,
    pub clock: ClockMode,
    /// The longest period between clock probes.
    pub clock_probe_max: Duration,
    pub freezer: FreezerSetting,
    /// SCHED_FIFO priority of the switch thread (0: normal scheduling).
    pub rt_priority: i32,
    /// How long before each boundary the switch thread wakes and spins.
    pub switch_spin: Duration,
    /// The agent's own binary, to run as the rank guard (`guard.rs`); `None` (agents
    /// started in-process, as tests do): no guard.
    pub guard_exe: Option<PathBuf>,
    /// Base of the ranks' messaging-library directories.
    pub msg_dir: PathBuf,
    /// Base of the output spools (this node's are in `X-Y/` under it).
    pub spool_dir: PathBuf,
    /// The most output one job may have spooled on this node, in bytes.
    pub spool_cap: u64,
}

impl AgentConfig {
    /// A config for tests: loopback, ephemeral port, the defaults otherwise.
    pub fn for_test(master: &str, x: u32, y: u32, tls: TlsFiles) -> Self {
        AgentConfig {
            master: normalize_master(master).expect("a valid test master address"),
            coord: Coord { x, y },
            listen: DEFAULT_LISTEN.parse().expect("literal"),
            ready_file: None,
            tls,
            allow_root: false,
            emulate: false,
            env_allow: BTreeSet::new(),
            kill_grace: Duration::from_millis(u64::from(DEFAULT_KILL_GRACE_MS)),
            log_format: LogFormat::Human,
            clock: ClockMode::Probe,
            clock_probe_max: crate::rt::clock::DEFAULT_MAX_PERIOD,
            freezer: FreezerSetting::Auto,
            rt_priority: RT_PRIORITY,
            switch_spin: Duration::ZERO,
            guard_exe: None,
            // One per test agent: tests run side by side, with the same jobs and nodes.
            msg_dir: {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                crate::msg::memory_dir().join(format!("gang-msg-test-{}-{n}", std::process::id()))
            },
            spool_dir: {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::env::temp_dir().join(format!("gang-spool-test-{}-{n}", std::process::id()))
            },
            spool_cap: crate::output::SPOOL_CAP,
        }
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            // toml's messages end with a newline and a source excerpt; keep them, trimmed.
            message: e.to_string().trim_end().to_owned(),
        })
    }
}

/// The most emulated nodes one process runs. Each holds about nine descriptors and two
/// threads: 4,096 of them need an open-file limit near 40,000 (1,024 a process, as
/// `gangctl start --emulate` runs them, fit in 20,000).
pub const MAX_EMULATED_PER_PROCESS: u32 = 4096;

/// `WxH` of `--emulate-nodes`: both at least 1, at most [`MAX_EMULATED_PER_PROCESS`] nodes.
fn parse_block(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{s:?}: expected WxH, e.g. 32x32"))?;
    let n = |v: &str| {
        v.parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{s:?}: {v:?} is not a positive number"))
    };
    let (w, h) = (n(w)?, n(h)?);
    if u64::from(w) * u64::from(h) > u64::from(MAX_EMULATED_PER_PROCESS) {
        return Err(format!(
            "{w}x{h} is {} nodes: at most {MAX_EMULATED_PER_PROCESS} emulated nodes a process",
            u64::from(w) * u64::from(h)
        ));
    }
    Ok((w, h))
}

/// Where output is spooled by default: on disk (the spool may be large, and it must not
/// take the node's memory), the agent's own.
pub fn default_spool_dir(agent_uid: u32) -> PathBuf {
    if agent_uid == 0 {
        PathBuf::from("/var/spool/gang/output")
    } else {
        std::env::temp_dir().join(format!("gang-spool-{agent_uid}"))
    }
}

/// `master.example:7471` -> `https://master.example:7471`; checks that the result is a
/// usable URI so a typo fails at startup rather than as an endless "master unreachable".
/// Several masters (sharing their state in etcd) are comma-separated; each is checked.
pub fn normalize_master(address: &str) -> Result<String, ConfigError> {
    if address.contains(',') {
        let all = address
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(normalize_one)
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(all.join(","));
    }
    normalize_one(address)
}

fn normalize_one(address: &str) -> Result<String, ConfigError> {
    let address = address.trim();
    let url = if address.contains("://") {
        address.to_owned()
    } else {
        format!("https://{address}")
    };
    let bad = |message: String| ConfigError::Master {
        address: address.to_owned(),
        message,
    };
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    match uri.scheme_str() {
        Some("https") => Ok(url),
        Some("http") => Err(bad(
            "the agent speaks only TLS to the master: use https:// and the master's agent port"
                .into(),
        )),
        other => Err(bad(format!("unsupported scheme {other:?} (use https)"))),
    }
}

mod layers;

pub use layers::ENV_PREFIX;

#[cfg(test)]
mod tests;
