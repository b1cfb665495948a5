//! What the master's state decides with (`MasterConfig`): the mesh, the scheduling
//! policy, liveness, limits and who may do what. Pure: it imports nothing of the daemon
//! (no tokio, tonic, prometheus, SQLite or etcd), so `state/` and `job/` can read it.
//!
//! What the daemon runs with besides (addresses, TLS files, the store, connection
//! limits), and how the file, the environment and the flags are layered into both, is
//! `crate::daemon_config`.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | `MasterConfig`, `Limits`, `AuthPolicy`, scheduling defaults |
//! | `liveness.rs` | heartbeat, timeout and lease defaults, and the rule they hold together |
//! | `fanout.rs` | the order tree's width and timeout, where fences are gathered |

mod fanout;
mod liveness;

use std::path::PathBuf;

use gang_core::{Backfill, DeadlockPolicy, GangMode, PlacerKind, Request, Shape};
use serde::{Deserialize, Serialize};

pub use fanout::{DEFAULT_FANOUT_WIDTH, DEFAULT_HOP_TIMEOUT_MS, Fanout};
pub use liveness::*;

/// Slices by default: Slurm's gang scheduler also shares a node four ways by default.
pub const DEFAULT_MPL: u32 = 4;
/// The default quantum (see README: gang overhead against quantum).
pub const DEFAULT_QUANTUM_MS: u32 = 50;
pub const DEFAULT_TABLE_LEAD_MS: u32 = 20;
/// SIGTERM-to-SIGKILL grace when a job is cancelled, unless configured.
pub const DEFAULT_KILL_GRACE_MS: u32 = 3000;

/// Bounds on what a request may ask, each with its config key (`[limits]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
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

/// What the master's state decides with, resolved.
#[derive(Debug, Clone)]
pub struct MasterConfig {
    pub mesh: Shape,
    pub mpl: u32,
    /// The placer: where a job's rectangle goes (config key `placer`, once `allocator`).
    pub placer: PlacerKind,
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
    /// then it keeps them running and switching on its last table (its lease).
    pub agent_lease_ms: u32,
    /// After the master starts (or takes over), a rank it adopts whose agent has not
    /// reported it this long is lost, once others were heard meanwhile (`recovery.rs`).
    pub adopt_timeout_ms: u32,
    /// The longest clock probe period asked of agents (0: theirs): [`liveness_scale`].
    pub clock_probe_max_ms: u32,
    /// SIGTERM-to-SIGKILL grace when a job is cancelled.
    pub kill_grace_ms: u32,
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
    pub auth: AuthPolicy,
    pub limits: Limits,
    /// Liveness up the tree: each head gathers this many nodes' heartbeats for the master
    /// (the order tree's `fanout_width`; 0: every agent heartbeats the master).
    pub liveness_width: u32,
}

impl MasterConfig {
    /// A config for tests. The path is not read: the daemon's test config
    /// (`DaemonConfig::for_test`) is where a state path matters; the argument stays while
    /// the state's tests call it with one.
    pub fn for_test(mesh: Shape, _state: PathBuf) -> Self {
        MasterConfig {
            auth: AuthPolicy {
                token_ttl_s: DEFAULT_TOKEN_TTL_S,
                token_max_ttl_s: DEFAULT_TOKEN_MAX_TTL_S,
                ..AuthPolicy::default()
            },
            limits: Limits::default(),
            mesh,
            mpl: 1,
            placer: PlacerKind::AdaptiveScan,
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
            quantum_ms: DEFAULT_QUANTUM_MS,
            gang_mode: GangMode::Stop,
            on_deadlock: DeadlockPolicy::Report,
            mpi: crate::job::Mpi::CLUSTER_DEFAULT,
            table_lead_ms: DEFAULT_TABLE_LEAD_MS,
            liveness_width: 0,
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
