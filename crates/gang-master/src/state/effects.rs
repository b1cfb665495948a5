//! The only way out of the reactor: the [`Effect`]s it emits into a round's [`Effects`].
//! They are the one vocabulary of what leaves: the daemon writes the [`Save`]s into the
//! round's SQLite transaction and carries out the rest once it has committed
//! (`actor/daemon.rs`); the tests keep them in a recorder (`testkit.rs`). A new effect is
//! a new variant here, and the compiler then asks each of them what to do with it.
//!
//! Nothing leaves the master for a change that was not saved: `round::run` hands the
//! effects out only after the commit.

use std::sync::Arc;

use gang_core::{JobId, SlotGrid, Submesh};

use crate::job::{SavedJob, Spec, State};
pub use crate::state::views::Coord;
use crate::state::views::JobView;

#[derive(Debug, Clone)]
pub enum Effect {
    /// Written into the round's transaction.
    Save(Save),
    /// Start a rank on the agent at `address`; its outcome comes back as
    /// `reactor::on_launched`.
    Launch {
        node: Coord,
        address: String,
        order: LaunchOrder,
    },
    /// Continue, then SIGTERM a job's ranks on a node; SIGKILL after `grace_ms` (0: now).
    Signal {
        node: Coord,
        address: String,
        job: JobId,
        grace_ms: u32,
    },
    /// A node's view of the newest table; its ack comes back as `reactor::on_table_acked`.
    Table {
        node: Coord,
        address: String,
        table: NodeTable,
    },
    /// A job changed: announced to watchers and attached clients.
    JobChanged(Box<JobView>),
    /// Rank 0 of a job runs on `node`, whose agent is at `address` (where stdin goes).
    Rank0Running {
        job: JobId,
        node: Coord,
        address: String,
    },
    Metric(Metric),
    /// A fence of a job's ranks completed: answer every rank still waiting in it.
    FenceDone {
        job: JobId,
        epoch: u32,
        kvs: Arc<crate::msg_jobs::Space>,
    },
}

/// What a round writes: committed together, or not at all.
#[derive(Debug, Clone)]
pub enum Save {
    Job(Box<SavedJob>),
    Drained {
        node: Coord,
        drained: bool,
    },
    /// The newest table version and the slot grid, so versions keep growing and the grid
    /// stays put across master restarts.
    TableMeta {
        version: u64,
        grid: SlotGrid,
    },
    /// The spec an array's tasks share, saved once (their rows name it: `spec_of`).
    Spec {
        array: JobId,
        spec: Arc<Spec>,
    },
}

/// A round's effects, in the order the reactor emitted them; a job saved twice in one
/// round is saved once, as it is last (a launch's thousands of rank exits in one round
/// wrote and serialized the whole job record once per rank).
#[derive(Debug, Default)]
pub struct Effects {
    out: Vec<Effect>,
    /// Where each job's save is in `out` (it is saved once, as it is last).
    saved_at: std::collections::HashMap<u64, usize>,
    /// A bug the reactor found in itself (a transition the table refuses): the round is
    /// taken back whole and answered with this.
    fault: Option<String>,
}

impl Effects {
    /// Whether anything but metrics would leave: a call, an announcement, a fence answer.
    pub fn acts(&self) -> bool {
        self.out
            .iter()
            .any(|e| !matches!(e, Effect::Metric(_) | Effect::Save(_)))
    }

    pub fn emit(&mut self, effect: Effect) {
        if let Effect::Save(Save::Job(job)) = &effect {
            let id = job.record.id.0;
            if let Some(&at) = self.saved_at.get(&id) {
                self.out[at] = effect;
                return;
            }
            self.saved_at.insert(id, self.out.len());
        }
        self.out.push(effect);
    }

    /// The round cannot stand (the first fault is kept): nothing of it is saved or leaves.
    pub fn fault(&mut self, why: impl std::fmt::Display) {
        self.fault.get_or_insert_with(|| why.to_string());
    }

    pub fn faulted(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    pub fn saves(&self) -> impl Iterator<Item = &Save> {
        self.out.iter().filter_map(|e| match e {
            Effect::Save(s) => Some(s),
            _ => None,
        })
    }

    pub fn into_vec(self) -> Vec<Effect> {
        self.out
    }
}

/// Start one rank: the job's spec as this rank gets it, and its place in the job. Reads
/// as that spec (`Deref`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOrder {
    pub job: JobId,
    pub rank: u32,
    pub size: u32,
    /// The job's rectangle (rank r at row-major position r).
    pub part: Submesh,
    /// The job's spec, with stdin only on rank 0 (if the job asked for it) and without the
    /// submitter's `GANG_MASTER`, which means nothing to a rank. Agents learn the job's
    /// resolved mode here, once, and never from tables.
    pub spec: Arc<Spec>,
}

impl std::ops::Deref for LaunchOrder {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        &self.spec
    }
}

/// One node's view of a slice table: the job it runs in each row (`None`: idle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    pub version: u64,
    pub grid: SlotGrid,
    pub effective_ns: i64,
    pub rows: Vec<Option<JobId>>,
    /// Jobs here given no slots: kept switched out.
    pub parked: Vec<JobId>,
}

/// Counters and histograms fed by events (gauges are read from the state after a round).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::testkit::record;

    fn saved(id: u64, state: State) -> Effect {
        let r = record(id).in_state(state);
        Effect::Save(Save::Job(Box::new(SavedJob {
            record: r,
            live: None,
            spec_of: None,
        })))
    }

    #[test]
    fn a_job_saved_twice_in_a_round_is_saved_once_as_it_is_last() {
        let mut fx = Effects::default();
        fx.emit(saved(1, State::Starting));
        fx.emit(Effect::Save(Save::Drained {
            node: (0, 0),
            drained: true,
        }));
        fx.emit(saved(2, State::Queued));
        fx.emit(saved(1, State::Running));
        fx.emit(saved(1, State::Completed));
        let jobs: Vec<(u64, State)> = fx
            .saves()
            .filter_map(|s| match s {
                Save::Job(j) => Some((j.record.id.0, j.record.state())),
                _ => None,
            })
            .collect();
        assert_eq!(jobs, vec![(1, State::Completed), (2, State::Queued)]);
        assert_eq!(fx.saves().count(), 3);
    }
}
