//! The job table, with an undo journal: while a round is open, the first change to each
//! job keeps its former value, so a round whose commit fails is taken back exactly without
//! copying the whole job history at every round.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gang_core::JobId;

use crate::job::Job;

#[derive(Debug, Default)]
pub struct JobTable {
    /// Boxed: a job is large, and a long history's tree moves its values as it grows.
    map: BTreeMap<JobId, Box<Job>>,
    /// Submission tokens by owner: a retried submission finds its job.
    by_token: HashMap<(u32, String), JobId>,
    /// Each allocation's steps, in order (a step's allocation never changes).
    steps: HashMap<JobId, Vec<JobId>>,
    /// Every job not ended, and perhaps some that ended since the last round (a job only
    /// goes from live to ended): what the per-tick scans read instead of a long history.
    live: BTreeSet<JobId>,
    /// Jobs handed out to change since the last round ended: pruned from `live` then.
    touched: Vec<JobId>,
    /// While a round is open: each job changed in it, as it was before (`None`: new).
    /// Boxed: a recovery journals a million new jobs, and the table's slots stay small.
    undo: Option<HashMap<JobId, Option<Box<Job>>>>,
}

impl JobTable {
    pub fn get(&self, id: JobId) -> Option<&Job> {
        self.map.get(&id).map(|j| &**j)
    }

    /// A job to change (journaled first).
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        let job = &mut **self.map.get_mut(&id)?;
        self.touched.push(id);
        if let Some(undo) = &mut self.undo {
            undo.entry(id)
                .or_insert_with(|| Some(Box::new(job.clone())));
        }
        Some(job)
    }

    pub fn insert(&mut self, job: Job) {
        let id = job.id();
        self.index(&job);
        let before = self.map.insert(id, Box::new(job));
        if before.is_none()
            && let Some(a) = self.map[&id].record.allocation
        {
            self.steps.entry(a).or_default().push(id);
        }
        if let Some(undo) = &mut self.undo {
            undo.entry(id).or_insert(before);
        }
    }

    fn index(&mut self, job: &Job) {
        if job.record.state().is_final() {
            self.live.remove(&job.id());
        } else {
            self.live.insert(job.id());
        }
        // An array's tasks share its spec, token included: the token finds the first.
        if let Some(t) = &job.record.client_token
            && job.record.array.is_none_or(|a| a.job == job.id())
        {
            self.by_token
                .insert((job.record.owner.uid, t.clone()), job.id());
        }
    }

    /// Every job of a recovered history at once, oldest first, into an empty table (a
    /// million inserted one by one move each job through the tree's splits).
    pub fn restore(&mut self, jobs: Vec<Box<Job>>) {
        if !self.map.is_empty() {
            return jobs.into_iter().for_each(|j| self.insert(*j));
        }
        if let Some(u) = &mut self.undo {
            u.reserve(jobs.len());
        }
        for job in &jobs {
            self.index(job);
            if let Some(a) = job.record.allocation {
                self.steps.entry(a).or_default().push(job.id());
            }
            if let Some(undo) = &mut self.undo {
                undo.insert(job.id(), None);
            }
        }
        self.map = jobs.into_iter().map(|j| (j.id(), j)).collect();
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
        self.map.values().map(|j| &**j)
    }

    /// Jobs below `before` (all for `None`), newest first.
    pub fn newest_before(&self, before: Option<JobId>) -> impl Iterator<Item = &Job> {
        let end = before.unwrap_or(JobId(u64::MAX));
        self.map.range(..end).rev().map(|(_, j)| &**j)
    }

    /// Jobs not ended below `before` (all for `None`), newest first.
    pub fn live_newest_before(&self, before: Option<JobId>) -> impl Iterator<Item = &Job> {
        let end = before.unwrap_or(JobId(u64::MAX));
        self.live
            .range(..end)
            .rev()
            .filter_map(|id| self.map.get(id))
            .map(|j| &**j)
            .filter(|j| !j.record.state().is_final())
    }

    /// Jobs that have not ended (queued, starting or running).
    pub fn live(&self) -> impl Iterator<Item = &Job> {
        self.live
            .iter()
            .filter_map(|id| self.map.get(id))
            .map(|j| &**j)
            .filter(|j| !j.record.state().is_final())
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
        self.prune();
    }

    /// Jobs that ended (or went away) leave the live set.
    fn prune(&mut self) {
        for id in std::mem::take(&mut self.touched) {
            if self
                .map
                .get(&id)
                .is_none_or(|j| j.record.state().is_final())
            {
                self.live.remove(&id);
            }
        }
    }

    /// Whether every job not ended is in the live set (for the invariant checks).
    pub fn live_index_holds(&self) -> bool {
        self.map
            .values()
            .all(|j| j.record.state().is_final() || self.live.contains(&j.id()))
    }

    pub fn rollback(&mut self) {
        let undo = self.undo.take().unwrap_or_default();
        // Jobs of the round are as before it: live ones live again, new ones gone.
        for (id, before) in &undo {
            match before {
                Some(job) if !job.record.state().is_final() => self.live.insert(*id),
                _ => self.live.remove(id),
            };
        }
        self.touched.clear();
        for (id, before) in undo {
            match before {
                Some(job) => self.map.insert(id, job),
                None => {
                    // A job new in the round: its token goes with it (tokens never change).
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
    fn a_rolled_back_round_leaves_no_trace() {
        let mut t = JobTable::default();
        t.insert(Job::new(record(1)));
        t.begin();
        t.get_mut(JobId(1))
            .unwrap()
            .record
            .force_state(State::Failed);
        t.get_mut(JobId(1)).unwrap().record.reason = "second change".into();
        t.insert(Job::new(record(2)));
        assert_eq!(t.len(), 2);
        t.rollback();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(JobId(1)).unwrap().record.state(), State::Queued);
        assert!(t.get(JobId(1)).unwrap().record.reason.is_empty());
        // Outside a round nothing is journaled; a committed round stays.
        t.begin();
        t.get_mut(JobId(1))
            .unwrap()
            .record
            .force_state(State::Cancelled);
        t.commit();
        t.rollback();
        assert_eq!(t.get(JobId(1)).unwrap().record.state(), State::Cancelled);
    }

    #[test]
    fn the_live_set_follows_jobs_that_end_and_rounds_taken_back() {
        let ids = |t: &JobTable| t.live().map(|j| j.id().0).collect::<Vec<_>>();
        let mut t = JobTable::default();
        let mut done = Job::new(record(1));
        done.record.force_state(State::Completed);
        t.restore(vec![Box::new(done), Box::new(Job::new(record(2)))]);
        t.insert(Job::new(record(3)));
        assert_eq!(ids(&t), [2, 3]);
        t.begin();
        t.get_mut(JobId(2))
            .unwrap()
            .record
            .force_state(State::Failed);
        t.insert(Job::new(record(4)));
        // Within the round, ended jobs are already left out.
        assert_eq!(ids(&t), [3, 4]);
        t.rollback();
        assert_eq!(ids(&t), [2, 3]);
        assert!(t.live_index_holds());
        t.begin();
        t.get_mut(JobId(3))
            .unwrap()
            .record
            .force_state(State::Cancelled);
        t.commit();
        assert_eq!(ids(&t), [2]);
        assert_eq!(t.live.len(), 1, "ended jobs are pruned at the round's end");
        assert!(t.live_index_holds());
    }
}
