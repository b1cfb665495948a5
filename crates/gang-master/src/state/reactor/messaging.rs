//! The messaging library's events: ranks' activity (from heartbeats), the deadlock check
//! (on the tick), and fences (the key-value exchange through which ranks find each other).
//!
//! A report or a fence is taken only from the agent of the node the rank runs on, and only
//! while its job is placed.

use std::collections::BTreeSet;

use gang_core::JobId;
use gang_core::job::deadlock::{Activity, Verdict};
use tracing::warn;

use crate::error::{MasterError, Result};
use crate::job::{Job, State};
use crate::msg_jobs::{DeadlockInfo, FenceStep};
use crate::state::effects::{Coord, Effect, Effects, Metric};
use crate::state::events::FenceArrival;
use crate::state::{MasterState, Now};

/// Whether `node` is where `rank` of `job` runs.
pub(in crate::state) fn runs_there(job: &Job, rank: u32, node: Coord) -> bool {
    rank < job.size() && job.node_of(rank) == Some(node)
}

impl MasterState {
    /// Activity reports from a heartbeat of `node`.
    pub(in crate::state) fn note_activity(&mut self, node: Coord, reports: &[(JobId, Activity)]) {
        for &(id, a) in reports {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            if !job.record.state().is_placed() || !runs_there(job, a.rank, node) {
                warn!(job = %id, rank = a.rank, node = ?node, "activity report for a rank that does not run there: ignored");
                continue;
            }
            self.jobs
                .get_mut(id)
                .expect("present")
                .messaging_mut()
                .report(a);
        }
    }

    /// One deadlock check of every running job whose ranks all reported since the last.
    pub(in crate::state) fn deadlock_checks(&mut self, fx: &mut Effects, now: Now) {
        let ids: Vec<JobId> = self
            .jobs
            .live()
            .filter(|j| j.record.state() == State::Running && j.messaging.is_some())
            .filter(|j| j.cancelled.is_none() && j.failure.is_none())
            .map(|j| j.id())
            .collect();
        for id in ids {
            let job = self.jobs.get_mut(id).expect("present");
            let shim = job.messaging_mut();
            if shim.deadlock.is_some() || shim.check() != Some(Verdict::Deadlocked) {
                continue;
            }
            let acts: Vec<Activity> = shim.activity.iter().flatten().copied().collect();
            let messages = acts.iter().map(|a| a.posted).sum();
            let job = self.jobs.get(id).expect("present");
            let waits = acts
                .iter()
                .map(|a| (*a, job.node_of(a.rank).unwrap_or_default()))
                .collect();
            let info = DeadlockInfo {
                detected_ns: now.wall_ns,
                waits,
                messages,
            };
            let policy = job.record.on_deadlock;
            warn!(job = %id, ranks = acts.len(), %policy, "job deadlocked: every rank blocked in a receive, nothing in flight");
            let job = self.jobs.get_mut(id).expect("present");
            job.messaging_mut().deadlock = Some(info);
            fx.emit(Effect::Metric(Metric::Deadlocked));
            if policy == gang_core::DeadlockPolicy::Kill {
                let why = format!(
                    "deadlocked: all {} ranks blocked in a receive with nothing in flight (--on-deadlock kill)",
                    acts.len()
                );
                if job.start_teardown(None, why) {
                    self.kill(fx, id, 0);
                }
                self.save(fx, now, id);
                self.maybe_finish(fx, now, id);
            } else {
                // Parked from the end of this round on (`parked_jobs`, the next table).
                let view = self.job_view(self.jobs.get(id).expect("present"), now);
                fx.emit(Effect::JobChanged(Box::new(view)));
            }
        }
    }

    /// Jobs found deadlocked and left for their owners (`--on-deadlock report`): they keep
    /// their place but get no slots, held stopped until cancelled, so that a job that can
    /// never progress stops taking time from the slices that can (SCore-D's point in
    /// detecting a global state: give the processors back).
    pub(in crate::state) fn parked_jobs(&self) -> BTreeSet<JobId> {
        self.jobs
            .live()
            .filter(|j| j.record.state() == State::Running)
            // A step runs in its allocation's slots: its deadlock is reported, and the
            // allocation keeps its rows.
            .filter(|j| j.record.allocation.is_none())
            .filter(|j| j.cancelled.is_none() && j.failure.is_none())
            .filter(|j| j.messaging.as_ref().is_some_and(|s| s.deadlock.is_some()))
            .map(|j| j.id())
            .collect()
    }

    /// A rank arrives at a fence: its answer now, or later through `Effect::FenceDone`.
    pub(in crate::state) fn fence(
        &mut self,
        fx: &mut Effects,
        arrival: FenceArrival,
    ) -> Result<Option<std::sync::Arc<crate::msg_jobs::Space>>> {
        let FenceArrival {
            node,
            job: id,
            rank,
            epoch,
            puts,
        } = arrival;
        if epoch == 0 || epoch == u32::MAX {
            // Agents number a rank's fences from 1; the last number is kept out so that the
            // fence after it has one (it overflowed: a panic of the state task).
            return Err(MasterError::Invalid(format!(
                "fence epoch {epoch} of job {id}: epochs run from 1 to {}",
                u32::MAX - 1
            )));
        }
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        if !job.record.state().is_placed() || job.failure.is_some() || job.cancelled.is_some() {
            // A placed job with a failure or a cancel is ending, though its state still
            // says running until its ranks are gone.
            let state = if job.record.state().is_placed() {
                if job.cancelled.is_some() {
                    "being cancelled"
                } else {
                    "failing"
                }
            } else {
                job.record.state().word()
            };
            return Err(MasterError::NotRunning { job: id, state });
        }
        if !runs_there(job, rank, node) {
            return Err(MasterError::Forbidden(format!(
                "rank {rank} of job {id} does not run on node ({},{})",
                node.0, node.1
            )));
        }
        let job = self.jobs.get_mut(id).expect("present");
        match job.messaging_mut().fence(rank, epoch, puts) {
            FenceStep::Complete(kvs) => {
                fx.emit(Effect::FenceDone {
                    job: id,
                    epoch,
                    kvs: kvs.clone(),
                });
                Ok(Some(kvs))
            }
            FenceStep::Done(kvs) => Ok(Some(kvs)),
            FenceStep::Wait { .. } => Ok(None),
            FenceStep::Ahead { epoch, current } => Err(MasterError::FenceAhead {
                job: id,
                epoch,
                current,
            }),
        }
    }
}
