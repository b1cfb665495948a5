//! The job table, with an undo journal: while a batch is open, the first change to each
//! job keeps its former value, so a batch whose commit fails is taken back exactly without
//! copying the whole job history at every batch.

use std::collections::{BTreeMap, HashMap};

use gang_core::JobId;

use crate::job::Job;

#[derive(Debug, Default)]
pub struct JobTable {
    map: BTreeMap<JobId, Job>,
    /// Submission tokens by owner: a retried submission finds its job.
    by_token: HashMap<(u32, String), JobId>,
    /// Each allocation's steps, in order (a step's allocation never changes).
    steps: HashMap<JobId, Vec<JobId>>,
    /// While a batch is open: each job changed in it, as it was before (`None`: new).
    undo: Option<HashMap<JobId, Option<Job>>>,
}

impl JobTable {
    pub fn get(&self, id: JobId) -> Option<&Job> {
        self.map.get(&id)
    }

    /// A job to change (journaled first).
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        let job = self.map.get_mut(&id)?;
        if let Some(undo) = &mut self.undo {
            undo.entry(id).or_insert_with(|| Some(job.clone()));
        }
        Some(job)
    }

    pub fn insert(&mut self, job: Job) {
        let id = job.id();
        if let Some(t) = &job.record.client_token {
            self.by_token.insert((job.record.owner.uid, t.clone()), id);
        }
        let alloc = job.record.allocation;
        let before = self.map.insert(id, job);
        if before.is_none()
            && let Some(a) = alloc
        {
            self.steps.entry(a).or_default().push(id);
        }
        if let Some(undo) = &mut self.undo {
            undo.entry(id).or_insert(before);
        }
    }

    /// The job `uid` submitted with this token, if any.
    pub fn by_token(&self, uid: u32, token: &str) -> Option<JobId> {
        self.by_token.get(&(uid, token.to_string())).copied()
    }

    /// An allocation's steps, in order.
    pub fn steps_of(&self, allocation: JobId) -> &[JobId] {
        self.steps.get(&allocation).map_or(&[], Vec::as_slice)
    }

    pub fn contains(&self, id: JobId) -> bool {
        self.map.contains_key(&id)
    }

    /// Oldest first.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Job> {
        self.map.values()
    }

    /// Jobs that have not ended (queued, starting or running).
    pub fn live(&self) -> impl Iterator<Item = &Job> {
        self.map.values().filter(|j| !j.record.state.is_final())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn begin(&mut self) {
        self.undo = Some(HashMap::new());
    }

    pub fn commit(&mut self) {
        self.undo = None;
    }

    pub fn rollback(&mut self) {
        for (id, before) in self.undo.take().unwrap_or_default() {
            match before {
                Some(job) => self.map.insert(id, job),
                None => {
                    // A job new in the batch: its token goes with it (tokens never change).
                    if let Some(j) = self.map.remove(&id) {
                        if let Some(t) = &j.record.client_token {
                            self.by_token.remove(&(j.record.owner.uid, t.clone()));
                        }
                        if let Some(a) = j.record.allocation
                            && let Some(steps) = self.steps.get_mut(&a)
                        {
                            steps.retain(|&s| s != id);
                        }
                    }
                    None
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::State;
    use crate::state::testkit::record;

    #[test]
    fn a_rolled_back_batch_leaves_no_trace() {
        let mut t = JobTable::default();
        t.insert(Job::new(record(1)));
        t.begin();
        t.get_mut(JobId(1)).unwrap().record.state = State::Failed;
        t.get_mut(JobId(1)).unwrap().record.reason = "second change".into();
        t.insert(Job::new(record(2)));
        assert_eq!(t.len(), 2);
        t.rollback();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(JobId(1)).unwrap().record.state, State::Queued);
        assert!(t.get(JobId(1)).unwrap().record.reason.is_empty());
        // Outside a batch nothing is journaled; a committed batch stays.
        t.begin();
        t.get_mut(JobId(1)).unwrap().record.state = State::Cancelled;
        t.commit();
        t.rollback();
        assert_eq!(t.get(JobId(1)).unwrap().record.state, State::Cancelled);
    }
}
