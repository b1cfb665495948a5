//! What comes into the reactor, in domain terms (the gRPC edge converts, `service/convert.rs`).

use std::collections::BTreeMap;
use std::fmt;

use gang_core::JobId;
use gang_core::job::deadlock::Activity;

use crate::job::State;
use crate::state::views::Coord;

pub use crate::job::Owner;

/// Who asks, as the connection identified them (never as a request states it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub owner: Owner,
    /// Root, a user named in `admins`, or a member of an `admin_groups` group.
    pub admin: bool,
}

impl Caller {
    /// Whether this caller may see and act on a job of `uid`.
    pub fn may_act_on(&self, uid: u32) -> bool {
        self.admin || self.owner.uid == uid
    }
}

/// A job as submitted, before validation: its spec as asked (`None` modes take the
/// cluster's defaults).
pub type NewJob = crate::job::Spec<crate::job::Asked>;

/// What `UpdateJob` changes of a job (`None`: left as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUpdate {
    pub job: JobId,
    /// Hold (`true`) or release (`false`) a queued job.
    pub hold: Option<bool>,
    pub time_limit_s: Option<u64>,
    pub name: Option<String>,
    /// End an allocation without a batch script, its command having exited with this code
    /// (`EndAllocation`; nothing else is changed then).
    pub end_with: Option<i32>,
}

/// Which jobs a listing shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListFilter {
    /// Empty: every state.
    pub states: Vec<State>,
    /// At most this many, newest first; 0: 1000.
    pub limit: usize,
    /// Only jobs below this id (the next page of a listing).
    pub before: Option<JobId>,
    /// Stop once the jobs listed weigh about this much (0: no budget).
    pub max_bytes: usize,
}

/// A rank an agent says it runs.
pub type RankRef = (JobId, u32);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub node: Coord,
    /// Where the master reaches the agent's NodeAgent service.
    pub address: String,
    pub running: Vec<RankRef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub mesh_w: u32,
    pub mesh_h: u32,
    pub heartbeat_ms: u32,
    /// Jobs the agent must no longer run.
    pub kill_jobs: Vec<JobId>,
    /// Silent this long (while others are heard), a node is lost.
    pub node_timeout_ms: u32,
    /// Without an answer of the master this long, the agent stops its ranks.
    pub agent_lease_ms: u32,
    /// Quiet liveness for a node that runs no rank (0: heartbeat every `heartbeat_ms`).
    pub idle_heartbeat_ms: u32,
    pub idle_node_timeout_ms: u32,
    /// The longest clock probe period the master asks for (0: the agent's own).
    pub clock_probe_max_ms: u32,
}

/// An agent's estimate of the master clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockReport {
    /// Master clock minus agent clock.
    pub offset_ns: i64,
    pub error_ns: i64,
    /// The agent trusts its host clock (chrony/PTP) instead of probing.
    pub from_host: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub node: Coord,
    pub running: Vec<RankRef>,
    pub clock: ClockReport,
    /// The newest slice table the agent holds.
    pub table_version: u64,
    /// What its ranks that use the messaging library are doing.
    pub activity: Vec<(JobId, Activity)>,
}

/// A rank of a job arrives at a fence, with everything it ever put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceArrival {
    pub node: Coord,
    pub job: JobId,
    pub rank: u32,
    pub epoch: u32,
    pub puts: BTreeMap<String, String>,
}

/// How a rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitHow {
    Code(i32),
    Signal(i32),
    /// It could not be started: the OS error, naming the node.
    Error(String),
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankExit {
    pub job: JobId,
    pub rank: u32,
    pub node: Coord,
    pub how: ExitHow,
    /// What the rank said when it called PMI abort (MPI_Abort), if it did.
    pub abort: Option<String>,
    /// Bytes of its streams that never reached the output log (the gRPC layer compares
    /// what the agent says the rank wrote with what the log holds).
    pub lost: Vec<(crate::job::OutStream, u64)>,
    /// What it used, as its agent measured it (`None`s: not measured).
    pub usage: crate::job::RankUsage,
}

/// Why a launch did not start its rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchFailure {
    /// The agent refused; its message names its node (agents' errors always do).
    Refused(String),
    /// The agent could not be reached, or the call broke.
    Unreachable { node: Coord, detail: String },
}

impl fmt::Display for LaunchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchFailure::Refused(m) => f.write_str(m),
            LaunchFailure::Unreachable {
                node: (x, y),
                detail,
            } => write!(f, "node ({x},{y}): agent unreachable: {detail}"),
        }
    }
}
