//! What the reactor answers and announces, in domain terms (converted at the gRPC edge).

use gang_core::{DeadlockPolicy, GangMode, JobId, MsgContext, Shape, SlotGrid, Submesh};

use crate::shim::DeadlockInfo;

use crate::job::State;

/// A node's coordinate on the mesh.
pub type Coord = (u32, u32);

/// A job as clients see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub id: JobId,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub time_limit_s: u64,
    pub stdin: bool,
    /// As requested.
    pub shape: String,
    /// As allocated.
    pub w: u32,
    pub h: u32,
    pub state: State,
    pub submesh: Option<Submesh>,
    /// Slice ids it holds, home first, while it runs.
    pub slices: Vec<u32>,
    /// The same slices by their place in the matrix (0 to MPL-1), for people.
    pub slice_rows: Vec<u32>,
    pub exit_code: Option<i32>,
    pub reason: String,
    pub submit_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Run time up to the instant of the view.
    pub run_ns: i64,
    pub gang: GangMode,
    pub ranks_done: u32,
    pub on_deadlock: DeadlockPolicy,
    pub msg_context: MsgContext,
    pub mpi: crate::job::Mpi,
    pub mpi_check: bool,
    pub output_files: crate::job::OutputFiles,
    /// Set once it was found deadlocked (while it runs, and after, if it was killed for it).
    pub deadlock: Option<DeadlockInfo>,
    /// Why it waits, while queued (empty otherwise): see [`MasterState::pending_reason`].
    ///
    /// [`MasterState::pending_reason`]: crate::state::MasterState::pending_reason
    pub pending_reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Up,
    Down,
    Drained,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub node: Coord,
    pub state: NodeState,
    pub address: Option<String>,
    /// Jobs with a rank here.
    pub jobs: Vec<JobId>,
    pub clock_offset_ns: i64,
    pub clock_error_ns: i64,
    pub clock_from_host: bool,
    pub last_heartbeat_ns: i64,
    /// The newest table version the agent acknowledged.
    pub table_version: u64,
    /// That version as a count of this run's tables (0: none, or not known).
    pub table_seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesView {
    pub mesh: Shape,
    pub nodes: Vec<NodeView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementView {
    pub job: JobId,
    pub submesh: Submesh,
    /// Its home slot (else a multiple-task slot).
    pub home: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceView {
    pub id: u32,
    pub placements: Vec<PlacementView>,
}

/// The slice table in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInForce {
    pub version: u64,
    /// The version as a count of this run's tables (1, 2, ...; 0: not known).
    pub seq: u64,
    pub grid: SlotGrid,
    pub effective_ns: i64,
    /// Row r runs slice `row_slices[r]`.
    pub row_slices: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixView {
    pub mesh: Shape,
    pub mpl: u32,
    pub slices: Vec<SliceView>,
    /// Queued jobs, head first.
    pub queue: Vec<JobId>,
    pub table: Option<TableInForce>,
    /// The master's clock at the view, and the row running then.
    pub now_ns: i64,
    pub running_row: Option<u32>,
}

/// Where rank 0 of a job stands, for stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rank0 {
    /// It runs on this node, whose agent is at this address.
    Running(Coord, String),
    /// Not yet: wait for `Effect::Rank0Running` or the job's end.
    NotYet,
    /// The job has ended.
    Ended,
}
