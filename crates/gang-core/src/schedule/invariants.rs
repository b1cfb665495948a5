//! The scheduler's invariants, checked after every step of every test.

use super::scheduler::Scheduler;
use crate::plan::JobId;
use crate::time::matrix::SliceChoice;

impl Scheduler {
    /// Every invariant of the scheduler; `Err` names the first one broken. Tests call this
    /// after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.matrix.check()?;
        let k = self.matrix.slices().len();
        if k > self.cfg.mpl as usize {
            return Err(format!(
                "{k} slices exceed the multiprogramming level {}",
                self.cfg.mpl
            ));
        }
        let running: Vec<JobId> = self.matrix.placements().map(|(j, _)| j).collect();
        if running.len() != self.progress.len()
            || running.iter().any(|j| !self.progress.contains_key(j))
        {
            return Err("running jobs and their progress records differ".into());
        }
        let mut queued = std::collections::BTreeSet::new();
        for q in &self.queue {
            if !queued.insert(q.id) {
                return Err(format!("job {} is queued twice", q.id));
            }
            if self.progress.contains_key(&q.id) {
                return Err(format!("job {} is both queued and running", q.id));
            }
            if !self.placer().can_ever_fit(self.mesh(), q.shape) {
                return Err(format!(
                    "queued job {} ({}) can never fit the {} mesh",
                    q.id,
                    q.shape,
                    self.mesh()
                ));
            }
        }
        if let Some(head) = self.head_index().map(|h| &self.queue[h]) {
            if k < self.cfg.mpl as usize
                && self
                    .matrix
                    .find_in_new_slice(self.placer(), head.shape)
                    .is_some()
            {
                return Err(format!(
                    "job {} waits although only {k} of {} slices exist",
                    head.id, self.cfg.mpl
                ));
            }
            if let Some((s, sm)) = self
                .matrix
                .find(self.placer(), head.shape, SliceChoice::First)
            {
                return Err(format!(
                    "job {} waits although {sm} is free in slice {s}",
                    head.id
                ));
            }
        }
        if !self.cfg.multiple_tasks && self.matrix.placements().any(|(_, p)| !p.extra.is_empty()) {
            return Err("a job holds extra slots although multiple tasks are off".into());
        }
        if self.cfg.multiple_tasks {
            for (j, p) in self.matrix.placements() {
                if let Some(s) = self
                    .matrix
                    .slices()
                    .iter()
                    .find(|s| s.occupancy().is_free(p.submesh))
                {
                    return Err(format!(
                        "job {j} could run in slice {} too but was not given the slot",
                        s.id
                    ));
                }
            }
        }
        Ok(())
    }
}
