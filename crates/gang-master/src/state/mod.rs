//! The master's state and the events that change it.
//!
//! ```text
//!  gRPC handlers, agents' reports, launch outcomes, the tick
//!        │ Cmd (domain types) over one mpsc queue
//!        v
//!  actor (crate::actor): a round of commands, one clock read (Now)
//!        │
//!        v
//!  round::run: checkpoint ─ reactor::on_*(state, fx, now, ...) ─ end_round ─ commit the
//!        │      saves (SQLite; tests: a recorder) ─ settle, or roll back ─ sanity check
//!        v
//!  MasterState: Scheduler (gang-core), jobs, nodes, slicer
//!        │
//!        v
//!  Effects: the Effect values the reactor emitted, handed out only once saved
//!           (daemon: carried out; tests: recorded)
//! ```
//!
//! The reactor reads no clock and does no I/O: time is an argument and everything that
//! leaves is an [`effects::Effect`]. A round whose commit fails is taken back whole
//! ([`MasterState::checkpoint`] / [`MasterState::rollback`]). The daemon's side
//! (the task, SQLite, tonic) is `crate::actor`; nothing here uses tokio, tonic or protobuf.

pub mod effects;
pub mod events;
mod policy;
pub mod queries;
pub mod reactor;
mod records;
pub mod round;
mod sanity;
pub mod views;

#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use gang_core::{Config as CoreConfig, JobId, Scheduler, Slicer, SlotGrid};

use crate::config::MasterConfig;
use crate::error::Result;
use crate::job::State;
use effects::{Effect, Effects, Save};
pub use records::jobs::JobTable;
pub use records::node_table::Node;
use records::node_table::NodeTable;

/// The instant a round is handled at, read once by the actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic nanoseconds since the master started: timeouts and the scheduler's clock
    /// (which must never go back, and the wall clock can be stepped).
    pub mono_ns: i64,
    /// Wall-clock nanoseconds since the Unix epoch: job timestamps and the slot grid, on
    /// which agents synchronize.
    pub wall_ns: i64,
    /// The master's responsive time: monotonic time with the master's own stalls taken out
    /// (a pause, a swap, a disk that held a commit, a long round: see `actor::LiveClock`).
    /// Silence is judged on it, so no agent is blamed for time the master was not
    /// listening.
    pub live_ns: i64,
}

impl Now {
    /// The scheduler core's clock, in seconds.
    pub fn mono_s(self) -> f64 {
        self.mono_ns as f64 / 1e9
    }
}

/// What a restarted master finds in its database besides the jobs.
#[derive(Debug, Clone, Default)]
pub struct Persisted {
    pub next_job_id: u64,
    pub table_version: u64,
    /// The last run's slot grid epoch (if it used the same quantum).
    pub table_epoch_ns: Option<i64>,
}

pub struct MasterState {
    cfg: MasterConfig,
    /// Shared with the round's undo journal until the round changes it (`sched_mut`): a
    /// copy at 10,000 nodes is three 10,000-node grids, and most rounds (a heartbeat
    /// batch, a tick) change nothing in it.
    sched: Arc<Scheduler>,
    jobs: JobTable,
    /// Row-major: node (x, y) at y * w + x.
    nodes: NodeTable,
    next_id: u64,
    /// Jobs put back after a restart (or whose node re-registered without some of their
    /// ranks): since when, and when their ranks not reported by then are lost (live ns).
    adopted: HashMap<JobId, (i64, i64)>,
    /// When a job was placed: for the launch latency histogram and the liveness of its
    /// nodes until the launch is answered.
    placed_at: HashMap<JobId, Placed>,
    /// Slice tables published to the agents.
    slicer: Slicer,
    /// When run times were last written (monotonic).
    run_saved_ns: i64,
    /// Queued jobs kept out of the core's queue: held, waiting on dependencies, or
    /// throttled by their array (see `gates`). Not saved: found again from the jobs.
    gated: BTreeSet<JobId>,
    /// What each user has queued (see `queued`), kept with its own undo journal.
    queued: records::queued::Queued,
    /// Who waits on what, and which gated jobs to look at again (see `gates`).
    gates: records::gate_index::GateIndex,
    /// Who beats whom (`reactor::liveness_tree`), worked out again when a node goes up or
    /// down (None until then).
    liveness_tree: Option<gang_core::tree::liveness::Assignment>,
    /// When `node_timeouts` last walked every node (live ns).
    timeouts_walked_ns: i64,
}

/// Move a job's record to `to` through the transition table (`job::transition`); a move the
/// table refuses faults the round (taken back whole) and returns false.
fn transition(
    fx: &mut effects::Effects,
    record: &mut crate::job::JobRecord,
    to: crate::job::State,
) -> bool {
    match record.move_to(to) {
        Ok(()) => true,
        Err(e) => {
            fx.fault(e);
            false
        }
    }
}

/// When a job was placed, on both of the master's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placed {
    mono_ns: i64,
    live_ns: i64,
}

/// Everything but the jobs and nodes, as it was when a round began (they keep their own
/// journals).
struct Checkpoint {
    sched: Arc<Scheduler>,
    next_id: u64,
    adopted: HashMap<JobId, (i64, i64)>,
    placed_at: HashMap<JobId, Placed>,
    slicer: Slicer,
    run_saved_ns: i64,
    gated: BTreeSet<JobId>,
    dirty: BTreeSet<JobId>,
}

impl MasterState {
    /// An empty state: every node down until its agent registers. Jobs come back with
    /// `reactor::on_recover`.
    pub fn new(cfg: MasterConfig, persisted: &Persisted) -> Result<Self> {
        let core_cfg = CoreConfig {
            mpl: cfg.mpl,
            placer: cfg.placer,
            backfill: cfg.backfill,
            fair_share: cfg.fair_share,
            ..CoreConfig::default()
        };
        let sched = Scheduler::new(cfg.mesh, core_cfg)?;
        let quantum_ns = i64::from(cfg.quantum_ms) * 1_000_000;
        let slicer = Slicer::new(
            quantum_ns,
            i64::from(cfg.table_lead_ms) * 1_000_000,
            persisted.table_version,
            persisted.table_epoch_ns,
        );
        Ok(MasterState {
            nodes: NodeTable::new(cfg.mesh.area() as usize),
            next_id: persisted.next_job_id.max(1),
            sched: Arc::new(sched),
            jobs: JobTable::default(),
            adopted: HashMap::new(),
            placed_at: HashMap::new(),
            slicer,
            run_saved_ns: 0,
            gated: BTreeSet::new(),
            queued: Default::default(),
            gates: Default::default(),
            liveness_tree: None,
            timeouts_walked_ns: i64::MIN,
            cfg,
        })
    }

    pub fn config(&self) -> &MasterConfig {
        &self.cfg
    }

    /// The scheduler, to change: copied here if the round's undo journal still shares it.
    fn sched_mut(&mut self) -> &mut Scheduler {
        Arc::make_mut(&mut self.sched)
    }

    /// Begin a round: what `rollback` returns to. Only `round::run` begins and ends them.
    fn checkpoint(&mut self) -> Checkpoint {
        self.jobs.begin();
        self.nodes.begin();
        self.queued.begin();
        Checkpoint {
            sched: self.sched.clone(),
            next_id: self.next_id,
            adopted: self.adopted.clone(),
            placed_at: self.placed_at.clone(),
            slicer: self.slicer.clone(),
            run_saved_ns: self.run_saved_ns,
            gated: self.gated.clone(),
            dirty: self.gates.dirty.clone(),
        }
    }

    /// The round was saved: keep it.
    fn settle(&mut self, _: Checkpoint) {
        self.jobs.commit();
        self.nodes.commit();
    }

    /// The round was not saved: take all of it back.
    fn rollback(&mut self, c: Checkpoint) {
        self.jobs.rollback();
        self.nodes.rollback();
        self.liveness_tree = None;
        self.queued.rollback();
        self.sched = c.sched;
        self.next_id = c.next_id;
        self.adopted = c.adopted;
        self.placed_at = c.placed_at;
        self.slicer = c.slicer;
        self.run_saved_ns = c.run_saved_ns;
        self.gated = c.gated;
        self.gates.dirty = c.dirty;
        self.gates.forget_summaries();
    }

    /// Gauges: (queued, running, slices, nodes up).
    pub fn gauges(&self) -> (usize, usize, usize, usize) {
        let (queued, running, slices) = self.job_gauges();
        (queued, running, slices, self.nodes_up())
    }

    /// Jobs queued and running, and slices: cheap, for every round.
    pub fn job_gauges(&self) -> (usize, usize, usize) {
        (
            self.sched.queue().len() + self.gated.len(),
            self.sched.matrix().running(),
            self.sched.matrix().slices().len(),
        )
    }

    /// Nodes up: a walk over every node (10,000 of them at 10,000 nodes).
    pub fn nodes_up(&self) -> usize {
        self.nodes.iter().filter(|n| n.up).count()
    }

    /// The slot grid of the tables (once one was published).
    pub fn grid(&self) -> Option<SlotGrid> {
        self.slicer.grid()
    }

    fn node_index(&self, (x, y): (u32, u32)) -> Option<usize> {
        let m = self.cfg.mesh;
        (x < m.w && y < m.h).then(|| (y * m.w + x) as usize)
    }

    fn coord(&self, i: usize) -> (u32, u32) {
        let w = self.cfg.mesh.w;
        (i as u32 % w, i as u32 / w)
    }
}

impl MasterState {
    /// Persist a job and announce it (both take effect with the round), and count it in
    /// its owner's queued jobs while it is queued.
    pub(in crate::state) fn save(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let queued = job.record.state() == State::Queued;
        if queued != job.charged {
            let (uid, spec) = (job.record.owner.uid, job.record.spec.clone());
            if queued {
                self.queued.charge(uid, &spec);
            } else {
                self.queued.uncharge(uid, &spec);
            }
            self.jobs.get_mut(id).expect("present").charged = queued;
        }
        self.job_changed(id);
        let job = self.jobs.get(id).expect("present");
        fx.emit(Effect::Save(Save::Job(Box::new(
            job.persisted(self.home_slice(id)),
        ))));
        fx.emit(Effect::JobChanged(Box::new(self.job_view(job, now))));
    }
}
