//! Array throttles (`--array 1-100%10`): a task of an array with a limit waits while that
//! many of its array's tasks are queued for nodes or running.

use std::collections::HashMap;

use gang_core::JobId;

use super::gate::Gate;
use crate::job::{Job, State};
use crate::state::MasterState;

impl MasterState {
    /// How many tasks the array `array` has.
    pub(in crate::state) fn array_size(&self, array: JobId) -> u32 {
        match self.jobs.get(array).and_then(|j| j.record.array) {
            Some(a) if a.count > 0 => a.count,
            _ => self.dependency_targets(array.0).len() as u32,
        }
    }

    /// Every task's index, in the order of their ids (a client names task T by it).
    pub(in crate::state) fn array_indices(&self, array: JobId) -> Vec<u32> {
        self.dependency_targets(array.0)
            .iter()
            .filter_map(|t| t.record.array.map(|a| a.task))
            .collect()
    }

    /// Tasks of `array` queued for nodes or running (counted once per pass, in `cache`).
    pub(in crate::state) fn active_tasks(
        &self,
        array: JobId,
        cache: &mut HashMap<JobId, u32>,
    ) -> u32 {
        *cache.entry(array).or_insert_with(|| {
            self.dependency_targets(array.0)
                .iter()
                .filter(|j| match j.record.state() {
                    State::Queued => !self.gated.contains(&j.id()),
                    s => s.is_placed(),
                })
                .count() as u32
        })
    }

    /// Whether `job`'s array is at its limit (`cache`: tasks counted once per pass).
    pub(in crate::state) fn throttle_gate(
        &self,
        job: &Job,
        cache: &mut HashMap<JobId, u32>,
    ) -> Option<Gate> {
        let a = job.record.array?;
        (a.throttle > 0 && self.active_tasks(a.job, cache) >= a.throttle).then_some(
            Gate::Throttled {
                array: a.job,
                limit: a.throttle,
            },
        )
    }
}
