//! The daemon's side of [`Effects`]: writes go into the batch's SQLite transaction at once
//! (the first failure stops further writes and fails the batch); everything else waits in
//! an outbox that the actor carries out only once the transaction has committed.

use gang_core::{JobId, SlotGrid};
use tracing::warn;

use crate::job::JobRecord;
use crate::state::effects::{Coord, Effects, LaunchOrder, Metric, NodeTable};
use crate::state::views::JobView;
use crate::store::Store;

/// What leaves the master once a batch is saved.
pub enum Out {
    Launch(Coord, String, LaunchOrder),
    Signal(Coord, String, JobId, u32),
    Table(Coord, String, NodeTable),
    JobChanged(JobView),
    Rank0(JobId, Coord, String),
    Metric(Metric),
    FenceDone(JobId, u32, std::sync::Arc<crate::shim::Space>),
}

pub struct DaemonEffects<'a> {
    store: &'a mut Store,
    failed: Option<String>,
    outbox: Vec<Out>,
}

impl<'a> DaemonEffects<'a> {
    pub fn begin(store: &'a mut Store) -> Self {
        let failed = store.begin().err().map(|e| e.to_string());
        DaemonEffects {
            store,
            failed,
            outbox: vec![],
        }
    }

    fn write(&mut self, w: impl FnOnce(&Store) -> rusqlite::Result<()>) {
        if self.failed.is_none()
            && let Err(e) = w(self.store)
        {
            self.failed = Some(e.to_string());
        }
    }

    /// Commit; the outbox if the batch is saved, else why not (and nothing of it is).
    pub fn finish(self) -> std::result::Result<Vec<Out>, String> {
        let why = match self.failed {
            Some(why) => why,
            None => match self.store.commit() {
                Ok(()) => return Ok(self.outbox),
                Err(e) => e.to_string(),
            },
        };
        if let Err(e) = self.store.rollback() {
            warn!(error = %e, "rollback after a failed batch");
        }
        Err(why)
    }
}

impl Effects for DaemonEffects<'_> {
    fn save_job(&mut self, record: &JobRecord) {
        self.write(|s| s.save_job(record));
    }

    fn save_drained(&mut self, (x, y): Coord, drained: bool) {
        self.write(|s| s.set_drained(x, y, drained));
    }

    fn save_table_meta(&mut self, version: u64, grid: SlotGrid) {
        self.write(|s| {
            s.set_table_version(version)?;
            s.set_table_epoch(grid.epoch_ns, grid.quantum_ns)
        });
    }

    fn launch(&mut self, node: Coord, address: &str, order: LaunchOrder) {
        self.outbox.push(Out::Launch(node, address.into(), order));
    }

    fn signal(&mut self, node: Coord, address: &str, job: JobId, grace_ms: u32) {
        self.outbox
            .push(Out::Signal(node, address.into(), job, grace_ms));
    }

    fn send_table(&mut self, node: Coord, address: &str, table: NodeTable) {
        self.outbox.push(Out::Table(node, address.into(), table));
    }

    fn job_changed(&mut self, job: JobView) {
        self.outbox.push(Out::JobChanged(job));
    }

    fn rank0_running(&mut self, job: JobId, node: Coord, address: &str) {
        self.outbox.push(Out::Rank0(job, node, address.into()));
    }

    fn metric(&mut self, m: Metric) {
        self.outbox.push(Out::Metric(m));
    }

    fn fence_done(&mut self, job: JobId, epoch: u32, kvs: std::sync::Arc<crate::shim::Space>) {
        self.outbox.push(Out::FenceDone(job, epoch, kvs));
    }
}
