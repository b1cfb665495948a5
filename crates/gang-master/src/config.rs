//! Configuration: defaults in code, then a TOML file, then command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gang_auth::pki::TlsFiles;
use gang_core::{AllocatorKind, Backfill, DeadlockPolicy, GangMode, Request, Shape};
use serde::Deserialize;

use crate::connections::{ConnLimits, ConnectionsSection};

/// Slices by default: Slurm's gang scheduler also shares a node four ways by default.
pub const DEFAULT_MPL: u32 = 4;
/// The default quantum (see README: gang overhead against quantum).
pub const DEFAULT_QUANTUM_MS: u32 = 50;
pub const DEFAULT_TABLE_LEAD_MS: u32 = 20;
/// How often an idle agent heartbeats by default. Measured on emulated fleets (README,
/// "Emulated fleets"): an idle 1,024-node fleet heartbeating every 500 ms kept 0.74 of a
/// core of the master busy; at 5 s a node, an idle node costs a tenth of that, while a
/// node that runs ranks still reports every heartbeat (its ranks' activity feeds the
/// deadlock check) and is still declared lost after the node timeout.
pub const DEFAULT_IDLE_HEARTBEAT_MS: u32 = 5000;
/// The busy heartbeat period and node timeout for up to [`LIVENESS_NODES`] nodes.
pub const DEFAULT_HEARTBEAT_MS: u32 = 500;
pub const DEFAULT_NODE_TIMEOUT_MS: u32 = 3000;
/// The clock probe period agents may grow to, for up to [`LIVENESS_NODES`] nodes (the
/// agents' own default).
pub const DEFAULT_CLOCK_PROBE_MAX_MS: u32 = 8000;
/// Up to this many nodes the defaults above hold; past it they are multiplied by
/// [`liveness_scale`].
pub const LIVENESS_NODES: u64 = 1024;

/// How much longer the default periods and timeouts are for a mesh of `nodes`: one per
/// started 1,024 nodes. Every heartbeat and clock probe is a TLS call that costs the master
/// about 0.15 ms (profiled on a 4,096-node emulated fleet: past the undo journal, the
/// master's time went to answering heartbeats); the defaults keep the master's load at
/// what 1,024 nodes cost at the base rates: at most ~2,000 busy heartbeats a second with
/// every node running ranks, ~200 idle ones and ~130 clock probes. At 10,000 nodes: a busy
/// heartbeat every 5 s and a node timeout of 30 s, an idle one every 50 s (Slurm's
/// `SlurmdTimeout` is 300 s). Set explicitly, the periods are taken as they are.
pub fn liveness_scale(nodes: u64) -> u32 {
    nodes.div_ceil(LIVENESS_NODES).max(1) as u32
}

/// How long an agent keeps its ranks running and switching without an answer of the
/// master (SlurmdTimeout's 300 s): a master paused, swapping, restarting or failing over
/// for less than this loses no job. See `check_liveness` for how it relates to the node
/// timeout.
pub const DEFAULT_AGENT_LEASE_MS: u32 = 300_000;

/// How long agents may take to find a master that just started or took over, beyond the
/// node timeout: an agent whose master hung waits out its call's deadline (5 s) before it
/// tries the next master listed, and may meet a standby not yet elected and come back to
/// the hung one once more. Three masters' worth.
pub const AGENTS_FIND_A_NEW_MASTER_MS: u32 = 15_000;

/// The adoption timeout when none is configured: the node timeout and the time agents
/// take to find a new master, within the agents' lease.
pub fn default_adopt_timeout(node_timeout_ms: u32, agent_lease_ms: u32) -> u32 {
    node_timeout_ms
        .saturating_add(AGENTS_FIND_A_NEW_MASTER_MS)
        .min(agent_lease_ms.saturating_sub(1))
        .max(node_timeout_ms)
}

/// The liveness settings, as `check_liveness` judges them together.
#[derive(Debug, Clone, Copy)]
pub struct LivenessTimes {
    pub heartbeat_ms: u32,
    pub node_timeout_ms: u32,
    pub idle_heartbeat_ms: u32,
    pub idle_node_timeout_ms: u32,
    pub agent_lease_ms: u32,
    pub adopt_timeout_ms: u32,
}

/// Idle keepalives the master waits for, beyond the node timeout, before an idle node
/// is down: one lost or late keepalive on a loaded host does not take a node down.
pub const IDLE_KEEPALIVES_MISSED: u32 = 3;

/// The idle node timeout when none is configured: three idle heartbeats and the node
/// timeout (18 s by default); the node timeout alone when idle agents are not quiet.
pub fn default_idle_node_timeout(idle_heartbeat_ms: u32, node_timeout_ms: u32) -> u32 {
    idle_heartbeat_ms
        .saturating_mul(IDLE_KEEPALIVES_MISSED)
        .saturating_add(if idle_heartbeat_ms == 0 {
            0
        } else {
            node_timeout_ms
        })
        .max(node_timeout_ms)
}

/// The liveness settings hold together: a node is never declared down between two
/// heartbeats it was told to send.
pub fn check_liveness(t: &LivenessTimes) -> Result<(), String> {
    let LivenessTimes {
        heartbeat_ms,
        node_timeout_ms,
        idle_heartbeat_ms,
        idle_node_timeout_ms,
        agent_lease_ms,
        adopt_timeout_ms,
    } = *t;
    if heartbeat_ms == 0 {
        return Err("heartbeat_ms is 0: agents would never report".into());
    }
    if node_timeout_ms <= heartbeat_ms {
        return Err(format!(
            "node_timeout_ms ({node_timeout_ms}) must be longer than heartbeat_ms ({heartbeat_ms}): \
             every node would be declared down between two heartbeats"
        ));
    }
    if idle_heartbeat_ms != 0 && idle_heartbeat_ms < heartbeat_ms {
        return Err(format!(
            "idle_heartbeat_ms ({idle_heartbeat_ms}) is shorter than heartbeat_ms ({heartbeat_ms}): \
             idle agents would report more often than busy ones (0 turns quiet liveness off)"
        ));
    }
    if idle_node_timeout_ms < node_timeout_ms {
        return Err(format!(
            "idle_node_timeout_ms ({idle_node_timeout_ms}) is shorter than node_timeout_ms ({node_timeout_ms})"
        ));
    }
    if idle_heartbeat_ms != 0 && idle_node_timeout_ms <= idle_heartbeat_ms {
        return Err(format!(
            "idle_node_timeout_ms ({idle_node_timeout_ms}) must be longer than idle_heartbeat_ms ({idle_heartbeat_ms}): \
             every idle node would be declared down between two keepalives"
        ));
    }
    // The master gives a node that runs ranks up after the node timeout; its agent gives
    // the master up after the lease. Shorter, an agent cut off would stop ranks of jobs the
    // master still counts as running. (An idle node has no ranks to stop.)
    if agent_lease_ms <= node_timeout_ms {
        return Err(format!(
            "agent_lease_ms ({agent_lease_ms}) must be longer than node_timeout_ms ({node_timeout_ms}): \
             agents would stop ranks of jobs the master still counts as running"
        ));
    }
    // After a start or a takeover, ranks wait this long for their agent to find the
    // master: not less than a running node is given, and not past the agents' lease (an
    // agent cut off would have stopped them by then).
    if adopt_timeout_ms < node_timeout_ms || adopt_timeout_ms >= agent_lease_ms {
        return Err(format!(
            "adopt_timeout_ms ({adopt_timeout_ms}) must be at least node_timeout_ms \
             ({node_timeout_ms}) and shorter than agent_lease_ms ({agent_lease_ms})"
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Deserialize)]
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
    pub allocator: Option<String>,
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
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    /// Origins (`https://portal.example:8443`) whose pages may call the API from a
    /// browser (CORS); empty: only pages the master serves itself.
    pub allow_origins: Option<Vec<String>>,
    /// Serve the reference portal page at `/portal/` on the client port.
    pub portal: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
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

/// Bounds on what a request may ask, each with its config key (`[limits]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A gRPC message (request) at most this large is decoded.
    pub max_request_bytes: usize,
    /// argv, counted as exec counts it: every string and its terminating NUL.
    pub max_argv_bytes: usize,
    /// The environment, counted the same way (`NAME=value` and a NUL each).
    pub max_env_bytes: usize,
    /// Nodes one job may ask for (0: the whole mesh).
    pub max_job_nodes: u32,
    /// Jobs one user may have queued at once.
    pub max_queued_per_user: usize,
    /// Bytes of commands, environments, names and paths one user's queued jobs may hold
    /// (an array's tasks share one spec: it counts once).
    pub max_queued_bytes_per_user: u64,
    /// Output kept per job (all ranks, both streams); beyond it output is dropped.
    pub max_output_bytes: u64,
    /// Tasks one job array may have (Slurm's MaxArraySize).
    pub max_array_tasks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // argv + env stay well under Linux's 2 MiB exec limit (and 128 KiB per string).
        Limits {
            max_request_bytes: 4 << 20,
            max_argv_bytes: 256 << 10,
            max_env_bytes: 1 << 20,
            max_job_nodes: 0,
            max_queued_per_user: 10_000,
            max_queued_bytes_per_user: 64 << 20,
            max_output_bytes: 1 << 30,
            max_array_tasks: 1001,
        }
    }
}

impl Limits {
    pub fn with(self, f: &LimitsSection) -> Limits {
        Limits {
            max_request_bytes: f.max_request_bytes.unwrap_or(self.max_request_bytes),
            max_argv_bytes: f.max_argv_bytes.unwrap_or(self.max_argv_bytes),
            max_env_bytes: f.max_env_bytes.unwrap_or(self.max_env_bytes),
            max_job_nodes: f.max_job_nodes.unwrap_or(self.max_job_nodes),
            max_queued_per_user: f.max_queued_per_user.unwrap_or(self.max_queued_per_user),
            max_queued_bytes_per_user: f
                .max_queued_bytes_per_user
                .unwrap_or(self.max_queued_bytes_per_user),
            max_output_bytes: f.max_output_bytes.unwrap_or(self.max_output_bytes),
            max_array_tasks: f.max_array_tasks.unwrap_or(self.max_array_tasks),
        }
    }
}

/// Who may do what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthPolicy {
    pub admins: Vec<String>,
    /// Admin groups, resolved to gids at startup.
    pub admin_gids: Vec<u32>,
    pub allow_root_jobs: bool,
    pub token_ttl_s: u64,
    pub token_max_ttl_s: u64,
}

/// Tokens last an hour unless asked otherwise, a day at most: a token that leaks is good
/// for little, and a revocation is kept no longer than the longest lifetime.
pub const DEFAULT_TOKEN_TTL_S: u64 = 3600;
pub const DEFAULT_TOKEN_MAX_TTL_S: u64 = 24 * 3600;
/// Where local clients find the master unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gang/master.sock";

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }
}

/// The leader's lease in etcd, s: a leader that dies is replaced about this long after
/// (one that stops cleanly gives its lease up, and is replaced at once). Five seconds: a
/// leader whose renewals are late only stops acting until they are answered, but a lease
/// etcd lets end is lost for good, and a loaded host or a slow disk can hold a renewal
/// for seconds; jobs do not notice a failover this long (agents keep their ranks for
/// `agent_lease_ms`). etcd grants at least its own minimum (1.5 election timeouts).
pub const DEFAULT_ETCD_LEASE_S: u32 = 5;
/// One etcd request's deadline, ms (a cluster without quorum answers nothing).
pub const DEFAULT_ETCD_TIMEOUT_MS: u32 = 3000;

/// Everything the master runs with, resolved.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub mesh: Shape,
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
    pub mpl: u32,
    pub allocator: AllocatorKind,
    pub backfill: Backfill,
    /// Order the queue by fair share between users (gang-core's `fair_share`); false:
    /// FCFS.
    pub fair_share: bool,
    pub heartbeat_ms: u32,
    /// A node whose agent is silent this long is down and its jobs fail.
    pub node_timeout_ms: u32,
    /// Quiet liveness: an agent that runs no rank heartbeats this often (0: every
    /// `heartbeat_ms`), and is down after `idle_node_timeout_ms` of silence (at least
    /// `node_timeout_ms`). See `liveness`.
    pub idle_heartbeat_ms: u32,
    pub idle_node_timeout_ms: u32,
    /// An agent that has had no answer of the master for this long stops its ranks; until
    /// then it keeps them running and switching on its last table.
    pub agent_lease_ms: u32,
    /// After the master starts (or takes over), a rank it adopts whose agent has not
    /// reported it this long is lost, once others were heard meanwhile (`recovery.rs`).
    pub adopt_timeout_ms: u32,
    /// The longest clock probe period asked of agents (0: theirs): [`liveness_scale`].
    pub clock_probe_max_ms: u32,
    /// SIGTERM-to-SIGKILL grace when a job is cancelled.
    pub kill_grace_ms: u32,
    pub ready_file: Option<PathBuf>,
    /// Length of a time slot: each row of the slice matrix runs this long in turn.
    pub quantum_ms: u32,
    /// How jobs that do not choose are switched.
    pub gang_mode: GangMode,
    /// What happens to a deadlocked job that does not choose.
    pub on_deadlock: DeadlockPolicy,
    /// What the agents serve MPI libraries of jobs that do not choose (`prun --mpi`).
    pub mpi: crate::job::Mpi,
    /// How far ahead of its first slot a new slice table is published, so that every
    /// agent has it in time (the agents' round trips are added: `state/tables.rs`).
    pub table_lead_ms: u32,
    /// Local clients' Unix socket (mode 0666: anyone may connect, and is identified by
    /// the socket's peer credentials).
    pub socket: PathBuf,
    /// The agents' port (mutual TLS).
    pub agent_listen: SocketAddr,
    /// The master's certificate (`master.gang`) and the cluster CA.
    pub tls: TlsFiles,
    pub auth: AuthPolicy,
    /// The key tokens are signed with (made on first start).
    pub token_key: PathBuf,
    pub limits: Limits,
    /// Connections and streams per listener and per peer, and their deadlines.
    pub connections: ConnLimits,
    /// How launches, signals and slice tables reach many agents (`agents::AgentPool`).
    pub fanout: Fanout,
    /// Origins whose web pages may call the API (CORS on the client port's gRPC-Web).
    pub web_origins: Vec<String>,
    /// Serve the reference portal (`web/portal.rs`) at `/portal/` on the client port.
    pub web_portal: bool,
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

/// The relay tree: the master calls at most `width` agents for one order, each of which
/// forwards to at most `width` more (`gang_core::fanout`); 0 calls every agent itself.
/// An order for at most `width` nodes goes flat either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    pub width: u32,
    /// How long one level of the tree may take to answer before its head is routed
    /// around (a subtree of L levels: 2^L − 1 times this, so that its head can route
    /// around one dead agent below it in time: `gang_proto::relay`).
    pub hop_timeout_ms: u32,
    /// Whether a job's fences are gathered among its agents, over the same tree (`fences
    /// = "agents"`, the default), or go to the master (`"master"`). Among the agents the
    /// master hears one record a fence, whatever the job's size.
    pub fences_among_agents: bool,
}

/// Chosen from `benches/emulated_fleet` (README, "Emulated fleets"): see there.
pub const DEFAULT_FANOUT_WIDTH: u32 = 16;
/// Above the longest a node's own part may take: a rank's launch waits up to 15 s for the
/// node's PMIx server (`gang-pmix`), and 256 emulated nodes of a debug build on 2 cores
/// took over 5 s to answer a leaf's relay. A dead agent (refused or unroutable
/// connection) is routed around after the 2 s connect timeout, whatever this is.
pub const DEFAULT_HOP_TIMEOUT_MS: u32 = 20_000;

impl Default for Fanout {
    fn default() -> Self {
        Fanout {
            width: DEFAULT_FANOUT_WIDTH,
            hop_timeout_ms: DEFAULT_HOP_TIMEOUT_MS,
            fences_among_agents: true,
        }
    }
}

impl Fanout {
    /// The settings, or why they do not hold (naming the key and its limits).
    pub fn check(self) -> Result<Fanout, String> {
        if self.width == 1 || self.width > 256 {
            return Err(format!(
                "fanout_width = {}: expected 0 (the master calls every agent) or 2 to 256",
                self.width
            ));
        }
        if !(100..=600_000).contains(&self.hop_timeout_ms) {
            return Err(format!(
                "relay_hop_timeout_ms = {}: expected 100 to 600000",
                self.hop_timeout_ms
            ));
        }
        Ok(self)
    }

    /// Whether an order for `nodes` agents goes through the tree.
    pub fn relays(self, nodes: usize) -> bool {
        self.width > 0 && nodes > self.width as usize
    }

    /// The width of a job's fence tree (0: fences at the master).
    pub fn fence_width(self) -> u32 {
        if self.fences_among_agents {
            self.width
        } else {
            0
        }
    }
}

impl MasterConfig {
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
        MasterConfig {
            socket: dir.join("master.sock"),
            agent_listen: "127.0.0.1:0".parse().expect("literal"),
            tls: TlsFiles {
                ca: dir.join("tls/ca.pem"),
                cert: dir.join("tls/master.pem"),
                key: dir.join("tls/master-key.pem"),
            },
            auth: AuthPolicy {
                token_ttl_s: DEFAULT_TOKEN_TTL_S,
                token_max_ttl_s: DEFAULT_TOKEN_MAX_TTL_S,
                ..AuthPolicy::default()
            },
            token_key: dir.join("token.key"),
            limits: Limits::default(),
            connections: ConnLimits::default(),
            web_origins: Vec::new(),
            web_portal: false,
            fanout: Fanout::default(),
            listen: "127.0.0.1:0".parse().expect("literal"),
            metrics_listen: "127.0.0.1:0".parse().expect("literal"),
            mesh,
            state,
            etcd: None,
            etcd_lease_s: DEFAULT_ETCD_LEASE_S,
            etcd_timeout_ms: DEFAULT_ETCD_TIMEOUT_MS,
            output_dir: None,
            mpl: 1,
            allocator: AllocatorKind::AdaptiveScan,
            backfill: Backfill::Easy,
            fair_share: true,
            heartbeat_ms: 200,
            node_timeout_ms: 2000,
            idle_heartbeat_ms: 0,
            idle_node_timeout_ms: 2000,
            agent_lease_ms: DEFAULT_AGENT_LEASE_MS,
            // The node timeout: the state tests tell adoption by it unless they say.
            adopt_timeout_ms: 2000,
            clock_probe_max_ms: 0,
            kill_grace_ms: 2000,
            ready_file: None,
            quantum_ms: DEFAULT_QUANTUM_MS,
            gang_mode: GangMode::Stop,
            on_deadlock: DeadlockPolicy::Report,
            mpi: crate::job::Mpi::CLUSTER_DEFAULT,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_defaults_and_the_settings_that_do_not_hold_together() {
        assert_eq!(default_idle_node_timeout(5000, 3000), 18_000);
        // The defaults hold to 1,024 nodes and grow with each started 1,024 past it.
        let scales: Vec<u32> = [1, 16, 1024, 1025, 4096, 10_000]
            .into_iter()
            .map(liveness_scale)
            .collect();
        assert_eq!(scales, [1, 1, 1, 2, 4, 10]);
        assert_eq!(default_idle_node_timeout(50_000, 30_000), 180_000);
        let times = |heartbeat_ms,
                     node_timeout_ms,
                     idle_heartbeat_ms,
                     idle_node_timeout_ms,
                     agent_lease_ms| LivenessTimes {
            heartbeat_ms,
            node_timeout_ms,
            idle_heartbeat_ms,
            idle_node_timeout_ms,
            agent_lease_ms,
            adopt_timeout_ms: default_adopt_timeout(node_timeout_ms, agent_lease_ms),
        };
        let check = |h, t, ih, it, l| check_liveness(&times(h, t, ih, it, l));
        assert!(check(5000, 30_000, 50_000, 180_000, 300_000).is_ok());
        // Quiet liveness off: the node timeout for every node.
        assert_eq!(default_idle_node_timeout(0, 3000), 3000);
        assert!(check(500, 3000, 5000, 18_000, 300_000).is_ok());
        assert!(check(500, 3000, 0, 3000, 300_000).is_ok());
        let err = |h, t, ih, it| check(h, t, ih, it, 300_000).unwrap_err();
        assert!(
            check(500, 3000, 5000, 18_000, 3000)
                .unwrap_err()
                .contains("agent_lease_ms (3000) must be longer than node_timeout_ms (3000)")
        );
        assert!(check(500, 3000, 5000, 18_000, 10_000).is_ok());
        assert!(err(0, 3000, 0, 3000).contains("heartbeat_ms is 0"));
        assert!(err(500, 500, 0, 500).contains("node_timeout_ms (500) must be longer"));
        assert!(err(500, 3000, 200, 18_000).contains("idle_heartbeat_ms (200) is shorter"));
        assert!(err(500, 3000, 5000, 2000).contains("idle_node_timeout_ms (2000) is shorter"));
        assert!(err(500, 3000, 5000, 4000).contains("must be longer than idle_heartbeat_ms"));
        // Adoption: at least the node timeout, less than the lease.
        let adopt = |ms| {
            check_liveness(&LivenessTimes {
                adopt_timeout_ms: ms,
                ..times(500, 3000, 5000, 18_000, 300_000)
            })
        };
        assert_eq!(default_adopt_timeout(3000, 300_000), 18_000);
        assert_eq!(
            default_adopt_timeout(3000, 10_000),
            9999,
            "within the lease"
        );
        assert!(adopt(3000).is_ok());
        assert!(
            adopt(2999)
                .unwrap_err()
                .contains("adopt_timeout_ms (2999) must be at least")
        );
        assert!(
            adopt(300_000)
                .unwrap_err()
                .contains("shorter than agent_lease_ms (300000)")
        );
    }

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

    #[test]
    fn the_fanout_width_is_flat_or_two_to_256() {
        let f = |width, hop_timeout_ms| Fanout {
            width,
            hop_timeout_ms,
            fences_among_agents: true,
        };
        assert!(f(0, 5000).check().is_ok());
        assert!(f(2, 100).check().is_ok());
        assert!(f(256, 600_000).check().is_ok());
        assert!(f(1, 5000).check().unwrap_err().contains("fanout_width = 1"));
        assert!(f(257, 5000).check().unwrap_err().contains("2 to 256"));
        assert!(
            f(16, 99)
                .check()
                .unwrap_err()
                .contains("relay_hop_timeout_ms = 99")
        );
        assert!(!f(0, 5000).relays(10_000));
        assert!(!f(16, 5000).relays(16));
        assert!(f(16, 5000).relays(17));
        assert_eq!(f(16, 5000).fence_width(), 16);
        assert_eq!(
            Fanout::default().fence_width(),
            DEFAULT_FANOUT_WIDTH,
            "fences among the agents by default"
        );
    }
}
