//! What the master keeps of a running job's messaging library (`gang-msg`): the latest
//! activity of each rank (for the deadlock check), the verdict, and the job's key-value
//! space (the fences through which its ranks exchange endpoints).
//!
//! None of it is saved: a restarted master rebuilds the activity from the next
//! heartbeats, and the key-value space from the agents' retried fences (each carries
//! everything its rank ever put).

use std::collections::BTreeMap;

use gang_core::deadlock::{Activity, DeadlockCheck, Verdict};

/// A deadlock the master found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlockInfo {
    /// Unix ns.
    pub detected_ns: i64,
    /// Every rank's wait, by rank, with its node.
    pub waits: Vec<(Activity, (u32, u32))>,
    /// Messages posted (= delivered) over the job.
    pub messages: u64,
}

/// A fence in progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    /// The epoch being gathered (1 before any; 0 until the first arrival after a restart).
    pub epoch: u32,
    /// Ranks that have arrived at `epoch`.
    pub arrived: Vec<bool>,
    /// Every key any rank put.
    pub kvs: BTreeMap<String, String>,
}

/// A fence arrival, answered at once or once every rank arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceStep {
    /// This arrival completed the fence: every rank waiting in it gets the space too.
    Complete(BTreeMap<String, String>),
    /// A retry of a fence that completed (its answer was lost): the space again.
    Done(BTreeMap<String, String>),
    /// Waits for others; answered by `Effects::fence_done`.
    Wait { epoch: u32 },
    /// Ahead of ranks still in an older fence (retries after a master restart): the agent
    /// asks again shortly.
    Ahead { epoch: u32, current: u32 },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobShim {
    /// The latest report of each rank.
    pub activity: Vec<Option<Activity>>,
    /// Which ranks reported since the previous check.
    pub fresh: Vec<bool>,
    pub check: DeadlockCheck,
    pub deadlock: Option<DeadlockInfo>,
    pub fence: Fence,
}

impl JobShim {
    pub fn new(size: u32) -> Self {
        JobShim {
            activity: vec![None; size as usize],
            fresh: vec![false; size as usize],
            check: DeadlockCheck::default(),
            deadlock: None,
            fence: Fence {
                epoch: 0,
                arrived: vec![false; size as usize],
                kvs: BTreeMap::new(),
            },
        }
    }

    /// A rank's report from its agent's heartbeat.
    pub fn report(&mut self, a: Activity) {
        if let Some(slot) = self.activity.get_mut(a.rank as usize) {
            *slot = Some(a);
            self.fresh[a.rank as usize] = true;
        }
    }

    /// Check, if every rank reported since the last check: `Some(verdict)`, else `None`
    /// (nothing is concluded from stale reports).
    pub fn check(&mut self) -> Option<Verdict> {
        if self.fresh.is_empty() || !self.fresh.iter().all(|&f| f) {
            return None;
        }
        self.fresh.iter_mut().for_each(|f| *f = false);
        let ranks: Vec<Activity> = self.activity.iter().flatten().copied().collect();
        Some(self.check.check(self.activity.len() as u32, &ranks))
    }

    /// A rank arrives at fence `epoch` with everything it ever put.
    pub fn fence(&mut self, rank: u32, epoch: u32, puts: BTreeMap<String, String>) -> FenceStep {
        let f = &mut self.fence;
        let size = f.arrived.len();
        f.kvs.extend(puts);
        if f.epoch == 0 || (epoch > f.epoch && !f.arrived.iter().any(|&a| a)) {
            // First arrival (after a restart, possibly at a later epoch), or every rank
            // moved on from an epoch nobody is waiting in.
            f.epoch = epoch;
        }
        if epoch < f.epoch {
            // A retry of a fence that completed (its answer was lost): answer again.
            return FenceStep::Done(f.kvs.clone());
        }
        if epoch > f.epoch {
            return FenceStep::Ahead {
                epoch,
                current: f.epoch,
            };
        }
        f.arrived[rank as usize] = true;
        if f.arrived.iter().filter(|&&a| a).count() == size {
            f.arrived.iter_mut().for_each(|a| *a = false);
            f.epoch += 1;
            FenceStep::Complete(f.kvs.clone())
        } else {
            FenceStep::Wait { epoch }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn a_fence_completes_when_every_rank_arrived_with_every_key() {
        let mut s = JobShim::new(3);
        assert_eq!(s.fence(0, 1, kv("a", "0")), FenceStep::Wait { epoch: 1 });
        assert_eq!(s.fence(2, 1, kv("c", "2")), FenceStep::Wait { epoch: 1 });
        let all = match s.fence(1, 1, kv("b", "1")) {
            FenceStep::Complete(kvs) => kvs,
            w => panic!("{w:?}"),
        };
        assert_eq!(all.len(), 3);
        // A lost answer retried: the same space at once.
        assert_eq!(s.fence(0, 1, kv("a", "0")), FenceStep::Done(all.clone()));
        // The next fence gathers anew; a rank ahead of it is told to ask again.
        assert_eq!(s.fence(0, 2, kv("a", "0")), FenceStep::Wait { epoch: 2 });
        assert_eq!(
            s.fence(1, 3, kv("b", "1")),
            FenceStep::Ahead {
                epoch: 3,
                current: 2
            }
        );
    }

    #[test]
    fn a_restarted_master_rebuilds_the_space_from_retries() {
        let mut s = JobShim::new(2);
        assert_eq!(s.fence(1, 4, kv("b", "1")), FenceStep::Wait { epoch: 4 });
        match s.fence(0, 4, kv("a", "0")) {
            FenceStep::Complete(kvs) => assert_eq!(kvs.len(), 2),
            w => panic!("{w:?}"),
        }
    }

    #[test]
    fn stale_reports_are_not_checked() {
        let mut s = JobShim::new(2);
        let a = |rank| Activity {
            rank,
            blocked_since_ns: 1,
            source: -1,
            tag: -1,
            posted: 0,
            delivered: 0,
        };
        s.report(a(0));
        assert_eq!(s.check(), None);
        s.report(a(1));
        assert_eq!(s.check(), Some(Verdict::Suspect));
        // Only rank 0 reported again: no second check yet.
        s.report(a(0));
        assert_eq!(s.check(), None);
        s.report(a(1));
        assert_eq!(s.check(), Some(Verdict::Deadlocked));
    }
}
