//! The only way out of the reactor: [`Effects`]. The daemon implements it with SQLite and
//! tonic (`actor.rs`); the tests with a recorder that asserts nothing unexpected was sent.
//!
//! Writes go into the batch's transaction as they are made; everything else (network
//! calls, announcements, metrics) is carried out only once that transaction has committed,
//! so nothing leaves the master for a change that was not saved.

use std::collections::BTreeMap;

use gang_core::{GangMode, JobId, MsgContext, SlotGrid};

use crate::job::{JobRecord, State};
pub use crate::state::views::Coord;
use crate::state::views::JobView;

/// Start one rank; its outcome comes back as `reactor::on_launched`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOrder {
    pub job: JobId,
    pub rank: u32,
    pub size: u32,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub user: String,
    /// Whether stdin is forwarded to this rank (rank 0 of a job that asked for it).
    pub stdin: bool,
    /// The job's mode, resolved: agents learn it here, once, and never from tables.
    pub gang: GangMode,
    /// The job's rectangle (rank r at row-major position r).
    pub part: gang_core::Submesh,
    pub msg_context: MsgContext,
    pub mpi: crate::job::Mpi,
    pub mpi_check: bool,
    pub output_files: crate::job::OutputFiles,
}

/// One node's view of a slice table: the job it runs in each row (`None`: idle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    pub version: u64,
    pub grid: SlotGrid,
    pub effective_ns: i64,
    pub rows: Vec<Option<JobId>>,
}

/// Counters and histograms fed by events (gauges are read from the state after a batch).
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    Submitted,
    Finished(State),
    /// Seconds from placement to every rank running.
    Launched(f64),
    TableVersion(u64),
    /// A job was found deadlocked.
    Deadlocked,
}

pub trait Effects {
    /// Persist a job (in the batch's transaction).
    fn save_job(&mut self, record: &JobRecord);
    fn save_drained(&mut self, node: Coord, drained: bool);
    /// The newest table version and the slot grid, so versions keep growing and the grid
    /// stays put across master restarts.
    fn save_table_meta(&mut self, version: u64, grid: SlotGrid);

    /// Start a rank on the agent at `address`.
    fn launch(&mut self, node: Coord, address: &str, order: LaunchOrder);
    /// Continue, then SIGTERM a job's ranks on a node; SIGKILL after `grace_ms` (0: now).
    fn signal(&mut self, node: Coord, address: &str, job: JobId, grace_ms: u32);
    /// Send a node its view of the newest table; its ack comes back as `on_table_acked`.
    fn send_table(&mut self, node: Coord, address: &str, table: NodeTable);

    /// A job changed: announced to watchers and attached clients.
    fn job_changed(&mut self, job: JobView);
    /// Rank 0 of a job runs on `node`, whose agent is at `address` (where stdin goes).
    fn rank0_running(&mut self, job: JobId, node: Coord, address: &str);
    fn metric(&mut self, m: Metric);
    /// A fence of a job's ranks completed: answer every rank still waiting in it.
    fn fence_done(&mut self, job: JobId, epoch: u32, kvs: std::sync::Arc<crate::shim::Space>);
}
