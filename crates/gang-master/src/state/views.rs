//! What the reactor answers and announces, in domain terms (converted at the gRPC edge).

use gang_core::{JobId, Shape, SlotGrid, Submesh};

use crate::job::JobRecord;
use crate::msg_jobs::DeadlockInfo;

/// A node's coordinate on the mesh.
pub type Coord = (u32, u32);

/// A job as clients see it: its record at the instant of the view (run time brought up to
/// it), and what the rest of the state says of it. Reads as the record (`Deref`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub record: JobRecord,
    /// Slice ids it holds, home first, while it runs.
    pub slices: Vec<u32>,
    /// The same slices by their place in the matrix (0 to MPL-1), for people.
    pub slice_rows: Vec<u32>,
    pub ranks_done: u32,
    /// Set once it was found deadlocked (while it runs, and after, if it was killed for it).
    pub deadlock: Option<DeadlockInfo>,
    /// Why it waits, while queued (empty otherwise): see [`MasterState::pending_reason`].
    ///
    /// [`MasterState::pending_reason`]: crate::state::MasterState::pending_reason
    pub pending_reason: String,
    /// For the first task of an array (whose id is the array's): how many tasks it has.
    pub array_tasks: u32,
    /// For an allocation: its steps, in order.
    pub step_ids: Vec<JobId>,
    /// For the first task of an array: every task's index, in the order of their ids.
    pub array_indices: Vec<u32>,
}

impl std::ops::Deref for JobView {
    type Target = JobRecord;
    fn deref(&self) -> &JobRecord {
        &self.record
    }
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
    /// Placed jobs given no slots (deadlocked).
    pub parked: Vec<JobId>,
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
