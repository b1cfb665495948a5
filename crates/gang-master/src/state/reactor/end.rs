//! A job's end: cancelled, timed out, failed, or completed once every rank is done; the
//! first failure sets its exit code and reason and stops the other ranks; the nodes it
//! held given back.

use gang_core::JobId;
use tracing::warn;

use crate::error::{MasterError, Result};
use crate::job::{OutputLoss, Rank, State, signal_code};
use crate::state::effects::{Effect, Effects, Metric};
use crate::state::events::{Caller, ExitHow, RankExit};
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

/// The exit code of a job that ran out of time (`timeout(1)`'s).
pub const TIMEOUT_EXIT: i32 = 124;

impl MasterState {
    /// `by`: who asks (`None`: the master itself, e.g. for a time limit).
    pub(in crate::state) fn cancel(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        by: Option<&Caller>,
        reason: String,
    ) -> Result<JobView> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        if let Some(caller) = by {
            self.check_access(caller, job, "cancel")?;
        }
        match job.record.state() {
            State::Queued => {
                let plan = if self.gated.remove(&id) || job.record.allocation.is_some() {
                    Default::default()
                } else {
                    self.sched_mut().finish(now.mono_s(), id)?
                };
                self.end_unplaced(fx, now, id, reason);
                self.execute(fx, now, plan);
            }
            s if s.is_final() && by.is_some() => {
                return Err(MasterError::AlreadyEnded {
                    job: id,
                    state: s.word(),
                });
            }
            State::Starting | State::Running if job.cancelled.is_none() => {
                // Its run time ends here: the time its ranks take to stop (longer on a
                // loaded host) is not run time, and a time limit ends a job at its limit.
                let run = self.run_ns(job, now.wall_ns);
                // The reply shows the job still running (its ranks are, until they stop),
                // and why it will end.
                let job = self.jobs.get_mut(id).expect("present");
                job.record.run_ns = run;
                job.run_accounted_to = now.wall_ns;
                job.record.reason = format!("{reason}; its ranks are being stopped");
                job.cancelled = Some(reason);
                // Durable before the reply: a master restart carries the cancel on.
                self.save(fx, now, id);
                self.kill(fx, id, self.cfg.kill_grace_ms);
                // An allocation's steps end with it (and one without ranks ends here).
                self.maybe_finish(fx, now, id);
            }
            _ => {}
        }
        self.view(id, now)
    }

    /// A job that never ran ends cancelled, saying why (out of the core and the gates
    /// already).
    pub(in crate::state) fn end_unplaced(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        why: String,
    ) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        crate::state::transition(fx, &mut job.record, State::Cancelled);
        job.record.reason = why;
        job.record.end_ns = now.wall_ns;
        fx.emit(Effect::Metric(Metric::Finished(State::Cancelled)));
        self.save(fx, now, id);
    }

    /// A rank will never run (it could not start, or its node is lost): fail the job.
    pub(in crate::state) fn rank_gone(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        rank: u32,
        reason: String,
    ) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if let Some(slot) = job.ranks.get_mut(rank as usize)
            && !slot.is_done()
        {
            *slot = Rank::Gone;
        }
        if job.start_teardown(None, reason) {
            self.kill(fx, id, 0);
        }
        self.save(fx, now, id);
        self.maybe_finish(fx, now, id);
    }

    /// Stop every rank of a job that may still run: SIGTERM, then SIGKILL after `grace_ms`.
    pub(in crate::state) fn kill(&self, fx: &mut Effects, id: JobId, grace_ms: u32) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        for r in 0..job.ranks.len() as u32 {
            if !job.ranks[r as usize].is_done()
                && let Some(node) = job.node_of(r)
            {
                self.signal_node(fx, id, node, grace_ms);
            }
        }
    }

    /// A batch of exit reports (an agent's, or a relayed subtree's): each rank's end is
    /// taken in turn, and each job they touch is then saved, and finished if every rank is
    /// done, once. Saving and finishing per rank walked and copied the job's every rank
    /// per exit: quadratic in a job's ranks (10,000 exits of one job in a few reports).
    pub(in crate::state) fn rank_exits(
        &mut self,
        fx: &mut Effects,
        now: Now,
        exits: Vec<RankExit>,
    ) {
        let mut touched: Vec<JobId> = Vec::new();
        for exit in exits {
            if let Some(id) = self.take_exit(fx, now, exit)
                && !touched.contains(&id)
            {
                touched.push(id);
            }
        }
        for id in touched {
            // The agent hears its report was taken only once this is saved: a master
            // restart must not count the rank as lost.
            self.save(fx, now, id);
            self.maybe_finish(fx, now, id);
        }
    }

    /// One rank's end, unsaved: its job, if the report was taken.
    fn take_exit(&mut self, fx: &mut Effects, now: Now, exit: RankExit) -> Option<JobId> {
        let id = exit.job;
        let Some(job) = self.jobs.get_mut(id) else {
            warn!(job = %id, "exit report for an unknown job");
            return None;
        };
        // The gRPC layer refuses these; the core does not rely on it.
        if !crate::state::reactor::messaging::runs_there(job, exit.rank, exit.node) {
            warn!(job = %id, rank = exit.rank, node = ?exit.node, "exit report for a rank that does not run there: ignored");
            return None;
        }
        // Looked at before it is changed: a mutable rank copies the job's ranks out of
        // the undo journal's share, not worth it for a report heard twice.
        if job.ranks.get(exit.rank as usize)?.is_done() {
            return None;
        }
        let slot = job.ranks.get_mut(exit.rank as usize)?;
        let (code, what) = match exit.how {
            ExitHow::Code(c) => (c, format!("exited with code {c}")),
            ExitHow::Signal(s) => (signal_code(s), crate::job::killed_by(s)),
            ExitHow::Error(e) => (127, e),
            ExitHow::Unknown => (1, "ended for an unknown reason".into()),
        };
        *slot = Rank::Exited(code);
        let job = self.jobs.get_mut(id).expect("present");
        job.record.usage.add(exit.rank, exit.usage);
        for &(stream, bytes) in exit.lost.iter().filter(|(_, b)| *b > 0) {
            job.record.output_lost.push(OutputLoss {
                rank: exit.rank,
                stream,
                bytes,
            });
        }
        self.note_started(fx, now, id);
        if code != 0 {
            let (x, y) = exit.node;
            let job = self.jobs.get_mut(id).expect("present");
            let what = exit.abort.as_deref().unwrap_or(&what);
            let why = format!("rank {} on node ({x},{y}) {what}", exit.rank);
            if job.start_teardown(Some(code), why) {
                self.kill(fx, id, self.cfg.kill_grace_ms);
            }
        }
        Some(id)
    }

    /// When every rank is done: the job's final state, its exit code, and its nodes back.
    pub(in crate::state) fn maybe_finish(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.record.state().is_final() {
            return;
        }
        if job.record.allocate {
            if !job.allocation_over() {
                return;
            }
            // Its steps end with it; it ends once they have.
            self.end_steps(fx, now, id);
            if self.live_steps(id) > 0 {
                return;
            }
        } else if !job.all_ranks_done() {
            return;
        }
        let job = self.jobs.get(id).expect("present");
        let run = self.run_ns(job, now.wall_ns);
        let job = self.jobs.get_mut(id).expect("present");
        job.record.run_ns = run;
        job.run_accounted_to = now.wall_ns;
        let (state, code, reason) = match (&job.cancelled, &job.failure) {
            // A job its time limit ended exits 124 everywhere (as `timeout(1)`, and as prun
            // exits), whatever signal its ranks died of: scripts tell it from a failure.
            (Some(why), _) if job.timed_out => (State::Timeout, Some(TIMEOUT_EXIT), why.clone()),
            (Some(why), f) => (State::Cancelled, f.as_ref().and_then(|f| f.0), why.clone()),
            (None, Some((code, why))) => (State::Failed, *code, why.clone()),
            (None, None) => match job.ended_with {
                Some(c) if c != 0 => (
                    State::Failed,
                    Some(c),
                    format!("the allocation's command exited with code {c}"),
                ),
                _ => (State::Completed, Some(0), String::new()),
            },
        };
        crate::state::transition(fx, &mut job.record, state);
        job.record.exit_code = code;
        job.record.reason = reason;
        job.record.end_ns = now.wall_ns;
        let job_alloc = job.record.allocation;
        self.adopted.remove(&id);
        self.placed_at.remove(&id);
        fx.emit(Effect::Metric(Metric::Finished(state)));
        self.save(fx, now, id);
        if let Some(alloc) = job_alloc {
            // Its nodes go back to its allocation: the next step may start, or the
            // allocation, waiting for its steps, end.
            self.admit_steps(fx, now, alloc);
            self.maybe_finish(fx, now, alloc);
            return;
        }
        match self.sched_mut().finish(now.mono_s(), id) {
            Ok(plan) => self.execute(fx, now, plan),
            Err(e) => warn!(job = %id, error = %e, "scheduler did not know the finished job"),
        }
    }
}
