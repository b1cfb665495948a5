//! Policies: what keeps a queued job out of the scheduler's queue, what ends it, and where
//! a step goes, each a module of its own with its tests, in the spirit of Flux's
//! job-manager plugins. A gate is asked of each in turn ([`MasterState::gate`]): a hold
//! (`hold`), dependencies (`dependency`), its array's limit (`array_throttle`); time
//! limits (`time_limit`) end a placed job; steps are placed inside their allocation
//! (`steps`).
//!
//! A queued job is either in the core's queue or in `gated`, never both (the sanity check
//! says so). After every round, [`MasterState::admit_ready`] queues the jobs whose gate
//! opened and ends those whose dependency can never hold, until nothing changes: an ended
//! job may open or close the gates of others.

pub mod array_throttle;
pub mod dependency;
pub mod gate;
pub mod hold;
pub mod steps;
pub mod time_limit;

use std::collections::HashMap;

use gang_core::{JobId, JobSpec, Shape};

use crate::error::{MasterError, Result};
use crate::job::Job;
use crate::state::effects::Effects;
use crate::state::{MasterState, Now};
use dependency::never_text;
pub(in crate::state) use gate::Gate;

/// Gated jobs looked at in one round at most: a round's cost stays bounded however many
/// wait; the others are looked at in the next rounds (a tick comes every 100 ms).
const ADMIT_PER_ROUND: usize = 2048;

impl MasterState {
    /// What keeps `job` out of the queue now, if anything: each policy in turn.
    pub(in crate::state) fn gate(
        &self,
        job: &Job,
        cache: &mut HashMap<JobId, u32>,
    ) -> Option<Gate> {
        hold::gate(job)
            .or_else(|| self.dependency_gate(job))
            .or_else(|| self.throttle_gate(job, cache))
    }

    /// Queue a job for nodes (it was gated, or is new and has no gate).
    pub(in crate::state) fn enqueue(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
    ) -> Result<()> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        let spec = JobSpec {
            id,
            shape: Shape::new(job.record.w, job.record.h),
            estimate: (job.record.time_limit_s > 0).then_some(job.record.time_limit_s as f64),
            user: job.record.owner.uid,
        };
        let plan = self.sched_mut().submit(now.mono_s(), spec)?;
        self.execute(fx, now, plan);
        Ok(())
    }

    /// Queue the gated jobs whose gate opened; end those whose dependency can never hold.
    /// Only jobs something changed for are looked at (`GateIndex::dirty`), at most
    /// `ADMIT_PER_ROUND` a round; what they change marks more, looked at in turn.
    pub(in crate::state) fn admit_ready(&mut self, fx: &mut Effects, now: Now) {
        let mut cache = HashMap::new();
        for _ in 0..ADMIT_PER_ROUND {
            let Some(id) = self.gates.dirty.pop_first() else {
                return;
            };
            if !self.gated.contains(&id) {
                continue;
            }
            let Some(job) = self.jobs.get(id) else {
                self.gated.remove(&id);
                continue;
            };
            // A hold is lifted by a request, which marks the job again.
            if job.record.hold.is_some() {
                continue;
            }
            match self.gate(job, &mut cache) {
                None => {
                    let array = job.record.array.map(|a| a.job);
                    self.gated.remove(&id);
                    if let Err(e) = self.enqueue(fx, now, id) {
                        tracing::warn!(job = %id, error = %e, "cannot queue a released job");
                    }
                    if let Some(a) = array {
                        *cache.entry(a).or_default() += 1;
                    }
                }
                Some(Gate::Never(d, u)) => {
                    self.gated.remove(&id);
                    self.end_unplaced(fx, now, id, never_text(d, u));
                    // Tasks of its array may move now.
                    cache.clear();
                }
                Some(_) => {}
            }
        }
    }

    /// Why a gated job waits, for its pending reason (`cache`: array limits counted for a
    /// listing of many).
    pub(in crate::state) fn gate_text(&self, job: &Job, cache: &mut HashMap<JobId, u32>) -> String {
        match self.gate(job, cache) {
            Some(Gate::Held(h)) if h.admin => format!("held by admin {}", h.by),
            // A task as its user names it: `gangctl release 17_3`.
            Some(Gate::Held(h)) => match job.record.array {
                Some(a) => format!("held by {} (gangctl release {}_{})", h.by, a.job, a.task),
                None => format!("held by {} (gangctl release {})", h.by, job.id()),
            },
            Some(Gate::Dependency(d)) => self.dependency_text(d),
            Some(Gate::Throttled { array, limit }) => {
                format!("array {array} runs at most {limit} tasks at once")
            }
            Some(Gate::Never(d, u)) => never_text(d, u),
            None => "released: queued with the next round".into(),
        }
    }
}
