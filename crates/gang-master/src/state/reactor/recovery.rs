//! A restarted master: jobs come back from the database, and running ones are adopted where
//! they run until their agents report them again (or the node timeout says they are lost).

use gang_core::{JobId, JobSpec, Shape};
use tracing::{info, warn};

use crate::error::{MasterError, Result};
use crate::job::{Job, Rank, SavedJob, State};
use crate::state::effects::{Coord, Effect, Effects, Save};
use crate::state::{MasterState, Now};

/// What recovery found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovered {
    pub adopted: usize,
    pub queued: usize,
    /// Running jobs that could not be placed back, now failed.
    pub lost: usize,
}

/// Jobs read back, as they are taken one by one.
#[derive(Default)]
struct Restoring {
    found: Recovered,
    /// Jobs placed again (adopted, or failed trying).
    placed: Vec<JobId>,
    /// Queued jobs, queued once every job is back (gates read other jobs).
    queued: Vec<JobSpec>,
    // Boxed as the job table keeps them (`JobTable::restore`): moved in, never copied.
    #[allow(clippy::vec_box)]
    restored: Vec<Box<Job>>,
    /// When adopted ranks not reported back are lost (live ns).
    adopt_due: i64,
}

impl Restoring {
    fn take(
        &mut self,
        st: &mut MasterState,
        fx: &mut Effects,
        now: Now,
        rec: SavedJob,
    ) -> Result<()> {
        st.next_id = st.next_id.max(rec.id.0 + 1);
        let mut job = Job::restored(rec);
        let id = job.id();
        let spec = JobSpec {
            id,
            shape: Shape::new(job.record.w, job.record.h),
            estimate: (job.record.time_limit_s > 0).then_some(job.record.time_limit_s as f64),
            user: job.record.spec.owner.uid,
        };
        match job.record.state() {
            // A step never meets the core: it waits for its allocation's nodes
            // (`admit_waiting_steps`), or runs in them, adopted until its ranks report.
            State::Queued if job.record.allocation.is_some() => {
                self.found.queued += 1;
            }
            State::Starting | State::Running if job.record.allocation.is_some() => {
                job.run_accounted_to = now.wall_ns;
                self.placed.push(id);
                st.adopted.insert(id, (now.live_ns, self.adopt_due));
                self.found.adopted += 1;
            }
            State::Queued => {
                self.queued.push(spec);
                self.found.queued += 1;
            }
            State::Starting | State::Running => self.adopt(st, fx, now, &mut job, spec)?,
            _ => {}
        }
        if job.record.state() == State::Queued {
            st.queued.charge(job.record.owner.uid, &job.record.spec);
            job.charged = true;
        }
        self.restored.push(Box::new(job));
        Ok(())
    }

    /// A running job back on its submesh; one that no longer fits fails.
    fn adopt(
        &mut self,
        st: &mut MasterState,
        fx: &mut Effects,
        now: Now,
        job: &mut Job,
        spec: JobSpec,
    ) -> Result<()> {
        let id = job.id();
        let sm = job
            .record
            .submesh
            .ok_or_else(|| MasterError::Invalid(format!("running job {id} has no submesh")))?;
        job.run_accounted_to = now.wall_ns;
        self.placed.push(id);
        match st.sched_mut().adopt(now.mono_s(), spec, sm) {
            Ok(_) => {
                st.adopted.insert(id, (now.live_ns, self.adopt_due));
                self.found.adopted += 1;
            }
            Err(e) => {
                // Never abort startup over one job: fail it; its ranks are killed when
                // their agents register (the job is final then).
                warn!(job = %id, error = %e, "cannot place a running job back");
                let why = format!("could not be placed back after a master restart: {e}");
                job.fail(None, why.clone());
                crate::state::transition(fx, &mut job.record, State::Failed);
                job.record.reason = why;
                job.record.end_ns = now.wall_ns;
                self.found.lost += 1;
            }
        }
        Ok(())
    }
}

impl MasterState {
    /// Every node offline until its agent registers; drained ones stay drained.
    fn start_offline(&mut self, now: Now, drained: &[Coord]) -> Result<()> {
        let mesh = self.cfg.mesh;
        for y in 0..mesh.h {
            for x in 0..mesh.w {
                self.sched_mut()
                    .set_node_offline(now.mono_s(), x, y, true)?;
            }
        }
        for &node in drained {
            if let Some(i) = self.node_index(node) {
                self.nodes[i].drained = true;
            }
        }
        Ok(())
    }

    /// Queued jobs in submission order; a gated one waits for its gate (held, its
    /// dependencies, its array's limit) as before the restart. All start gated, so that a
    /// task not yet looked at does not count against its array's limit.
    fn queue_recovered(&mut self, now: Now, queued: Vec<JobSpec>) -> Result<()> {
        self.gated.extend(queued.iter().map(|s| s.id));
        for spec in &queued {
            let deps = &self
                .jobs
                .get(spec.id)
                .expect("inserted above")
                .record
                .dependency;
            if !deps.is_empty() {
                let deps = deps.clone();
                self.gates.wait_on(spec.id, &deps);
            }
        }
        let mut cache = Default::default();
        for spec in queued {
            let job = self.jobs.get(spec.id).expect("inserted above");
            if self.gate(job, &mut cache).is_none() {
                // Offline nodes keep it queued until agents register.
                let array = job.record.array.map(|a| a.job);
                self.gated.remove(&spec.id);
                self.sched_mut().submit(now.mono_s(), spec)?;
                if let Some(a) = array {
                    *cache.entry(a).or_default() += 1;
                }
            }
        }
        Ok(())
    }

    /// Ranks of adopted jobs that no agent reported back within `adopt_timeout_ms` are
    /// lost: at once where their node's agent registered again without them; where it did
    /// not register yet, only once its silence is its own (`silence_is_its_own`: after a
    /// restart no agent at all coming back blames the master's side, not the nodes). The
    /// adoption timeout is longer than the node timeout: after a failover from a master
    /// that hung, agents find the new one each at its own pace (a call's deadline per
    /// master tried), and one that comes seconds after the others is slow, not gone.
    pub(in crate::state) fn adoption_timeouts(&mut self, fx: &mut Effects, now: Now) {
        let overdue: Vec<(JobId, (i64, i64))> = self
            .adopted
            .iter()
            .filter(|&(_, &(_, due))| now.live_ns > due)
            .map(|(id, &w)| (*id, w))
            .collect();
        if overdue.is_empty() {
            return;
        }
        let hearing = self.hearing();
        for (id, (since, due)) in overdue {
            let waiting_on_silence = self.jobs.get(id).is_some_and(|j| {
                (0..j.ranks.len() as u32)
                    .filter(|&r| j.ranks[r as usize] == Rank::Pending)
                    .filter_map(|r| j.node_of(r).and_then(|c| self.node_index(c)))
                    .any(|i| {
                        !self.nodes[i].up
                            && !self.silence_is_its_own(&hearing, None, (since, due), now)
                    })
            });
            if waiting_on_silence {
                continue;
            }
            if self.requeue_unlaunched(fx, now, id) {
                continue;
            }
            self.adopted.remove(&id);
            let missing: Vec<(u32, Coord)> = self.jobs.get(id).map_or(vec![], |j| {
                (0..j.ranks.len() as u32)
                    .filter(|&r| j.ranks[r as usize] == Rank::Pending)
                    .filter_map(|r| Some((r, j.node_of(r)?)))
                    .collect()
            });
            for (rank, (x, y)) in missing {
                let why = format!(
                    "rank {rank} on node ({x},{y}) was not found after a master or agent restart"
                );
                self.rank_gone(fx, now, id, rank, why);
            }
        }
    }

    /// A job placed before a restart whose launch reached none of its agents (the master
    /// died between saving the placement and sending it): every node of it registered
    /// again and none runs, or ran, a rank of it. It never ran, so it is queued again, as it
    /// was before it was placed, rather than failed. One rank reported, or one node not
    /// back (its ranks may run there), and it is not touched: its ranks are lost as before.
    fn requeue_unlaunched(&mut self, fx: &mut Effects, now: Now, id: JobId) -> bool {
        let Some(job) = self.jobs.get(id) else {
            return false;
        };
        let untouched = job.record.state() == State::Starting
            && job.record.allocation.is_none()
            && !job.record.allocate
            && job.failure.is_none()
            && job.cancelled.is_none()
            && !job.timed_out
            && job.ranks.iter().all(|r| *r == Rank::Pending)
            && job
                .nodes()
                .into_iter()
                .all(|n| self.node_index(n).is_some_and(|i| self.nodes[i].up));
        if !untouched {
            return false;
        }
        match self.sched_mut().finish(now.mono_s(), id) {
            Ok(plan) => self.execute(fx, now, plan),
            Err(e) => {
                warn!(job = %id, error = %e, "scheduler did not know the adopted job");
                return false;
            }
        }
        self.adopted.remove(&id);
        self.placed_at.remove(&id);
        let job = self.jobs.get_mut(id).expect("looked at above");
        let mut record = job.record.clone();
        crate::state::transition(fx, &mut record, State::Queued);
        record.submesh = None;
        record.start_ns = 0;
        record.run_ns = 0;
        *job = Job::new(record);
        info!(job = %id, "its launch reached no agent before the master restarted: queued again");
        if let Err(e) = self.enqueue(fx, now, id) {
            warn!(job = %id, error = %e, "could not queue the job again");
        }
        self.save(fx, now, id);
        true
    }
}

/// Every node starts offline until its agent registers; jobs come back: running ones
/// at their submesh, queued ones in submission order.
pub fn on_recover(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    records: impl IntoIterator<Item = SavedJob>,
    drained: &[Coord],
) -> Result<Recovered> {
    st.start_offline(now, drained)?;
    // Running jobs go back slice by slice: the jobs of one former slice are disjoint,
    // so each lands in a slice no later than its old one and the matrix fits again.
    // Queued jobs keep their submission (id) order. The rest (a history of ended jobs,
    // perhaps a million) are taken as they come, never copied together.
    let mut back = Restoring {
        // Agents find a master that just started at their own pace (`adopt_timeout_ms`).
        adopt_due: now.live_ns + i64::from(st.cfg.adopt_timeout_ms) * 1_000_000,
        ..Restoring::default()
    };
    let mut running = vec![];
    for rec in records {
        if rec.state().is_placed() {
            running.push(rec);
        } else {
            back.take(st, fx, now, rec)?;
        }
    }
    running.sort_by_key(|r| {
        let slice = r.live.as_ref().and_then(|l| l.home_slice);
        (slice.unwrap_or(u32::MAX), r.id)
    });
    for rec in running {
        back.take(st, fx, now, rec)?;
    }
    let Restoring {
        found,
        placed,
        mut queued,
        mut restored,
        ..
    } = back;
    // Oldest first (running ones were taken last): the table is built at once.
    restored.sort_by_key(|j| j.id());
    st.jobs.restore(restored);
    queued.sort_by_key(|s: &JobSpec| s.id);
    st.queue_recovered(now, queued)?;
    // Home slices were renumbered: save them, so a later restart groups jobs right.
    for &id in &placed {
        let job = st.jobs.get(id).expect("inserted above");
        fx.emit(Effect::Save(Save::Job(Box::new(
            job.persisted(st.home_slice(id)),
        ))));
    }
    // A job whose every rank had ended is over (its end was not saved in time).
    for id in placed {
        st.maybe_finish(fx, now, id);
    }
    info!(
        adopted = found.adopted,
        queued = found.queued,
        lost = found.lost,
        total = st.jobs.len(),
        "state recovered"
    );
    Ok(found)
}
