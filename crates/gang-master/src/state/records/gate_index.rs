//! What the gates are judged from, kept between rounds (`state::policy`): who waits on
//! what, which gated jobs to look at again, and what each named id stands for now.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use gang_core::JobId;
use gang_core::schedule::dependency::{Dep, Upstream};

use crate::job::State;

/// What gates are judged from, kept between rounds so that a round looks only at what
/// changed: who waits on what (an id a dependency names: a job, or an array's first task),
/// which gated jobs to look at again, and what the jobs each named id stands for are now.
#[derive(Debug, Default)]
pub(in crate::state) struct GateIndex {
    /// Jobs whose dependencies name each id. Never taken back with a round (a job that
    /// never was only costs a look), and pruned as it is read.
    pub(in crate::state) dependents: HashMap<u64, Vec<JobId>>,
    /// Gated jobs to look at again: something they wait on changed, or they are new.
    pub(in crate::state) dirty: BTreeSet<JobId>,
    /// The distinct states of the jobs each named id stands for, until one of them changes
    /// (filled by readers: views find them too; only the state task takes the lock).
    pub(in crate::state) summaries: Mutex<HashMap<u64, Named>>,
}

impl GateIndex {
    /// `job` waits on `deps`: their changes are its to look at.
    pub(in crate::state) fn wait_on(&mut self, job: JobId, deps: &[Dep]) {
        for d in deps {
            let v = self.dependents.entry(d.job).or_default();
            if !v.contains(&job) {
                v.push(job);
            }
        }
        self.dirty.insert(job);
    }

    /// A round was taken back: what was found from its changes may be wrong.
    pub(in crate::state) fn forget_summaries(&self) {
        self.summaries().clear();
    }

    pub(in crate::state) fn summaries(&self) -> MutexGuard<'_, HashMap<u64, Named>> {
        self.summaries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the jobs an id named by dependencies stands for are now: all a verdict needs (their
/// distinct states), and what a pending reason says of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::state) struct Named {
    pub(in crate::state) classes: Vec<Upstream>,
    /// Jobs it stands for (an array's tasks), and how many of them ended.
    pub(in crate::state) total: u32,
    pub(in crate::state) ended: u32,
    /// The job's state, when it stands for one job.
    pub(in crate::state) single: Option<State>,
}
