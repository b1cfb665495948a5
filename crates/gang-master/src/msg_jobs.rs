//! What the master keeps of a running job's messaging library (`gang-msg`): the latest
//! activity of each rank (for the deadlock check), the verdict, and the job's key-value
//! space (the fences through which its ranks exchange endpoints).
//!
//! None of it is saved: a restarted master rebuilds the activity from the next
//! heartbeats, and the key-value space from the agents' retried fences (each carries
//! everything its rank ever put).
//!
//! The space remembers the fence at which each key last changed, so a rank that holds
//! the space as of its previous fence is answered with what changed since (MPICH fences
//! three times and puts only before the first: the later answers are empty instead of
//! the whole space again, which at 1,024 ranks is ~480 MB through the master each).

use std::collections::BTreeMap;
use std::sync::Arc;

use gang_core::job::deadlock::{Activity, DeadlockCheck, Verdict};

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

/// A job's key-value space: every key any rank put, its value, and the fence epoch at
/// which the value last changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Space(BTreeMap<String, (String, u32)>);

impl Space {
    /// Take a rank's puts, arriving at fence `epoch`: a new or different value is marked
    /// as changed there; the same value again (puts are cumulative) is not.
    fn put(&mut self, puts: BTreeMap<String, String>, epoch: u32) {
        for (k, v) in puts {
            match self.0.get(&k) {
                Some((old, _)) if *old == v => {}
                _ => {
                    self.0.insert(k, (v, epoch));
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The answer for a rank whose agent holds the space as of fence `known` (0: none):
    /// the keys changed after it, and whether that is a delta (to merge into what the
    /// agent holds) rather than the whole space.
    pub fn answer(&self, known: u32) -> (BTreeMap<String, String>, bool) {
        let kvs = self
            .0
            .iter()
            .filter(|(_, (_, changed))| *changed > known)
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        (kvs, known > 0)
    }
}

/// A fence in progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    /// The epoch being gathered (1 before any; 0 until the first arrival after a restart).
    pub epoch: u32,
    /// Ranks that have arrived at `epoch`.
    pub arrived: Vec<bool>,
    /// Every key any rank put.
    pub kvs: Space,
}

/// A fence arrival, answered at once or once every rank arrived. The space is shared by
/// every answer of the fence (each is cut to what its rank lacks when it is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceStep {
    /// This arrival completed the fence: every rank waiting in it gets the space too.
    Complete(Arc<Space>),
    /// A retry of a fence that completed (its answer was lost): the space again.
    Done(Arc<Space>),
    /// Waits for others; answered by `Effect::FenceDone`.
    Wait { epoch: u32 },
    /// Ahead of ranks still in an older fence (retries after a master restart): the agent
    /// asks again shortly.
    Ahead { epoch: u32, current: u32 },
}

/// What the master keeps of one running job's messaging library.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobMessaging {
    /// The latest report of each rank.
    pub activity: Vec<Option<Activity>>,
    /// Which ranks reported since the previous check.
    pub fresh: Vec<bool>,
    pub check: DeadlockCheck,
    pub deadlock: Option<DeadlockInfo>,
    pub fence: Fence,
}

impl JobMessaging {
    pub fn new(size: u32) -> Self {
        JobMessaging {
            activity: vec![None; size as usize],
            fresh: vec![false; size as usize],
            check: DeadlockCheck::default(),
            deadlock: None,
            fence: Fence {
                epoch: 0,
                arrived: vec![false; size as usize],
                kvs: Space::default(),
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
        f.kvs.put(puts, epoch);
        if f.epoch == 0 || (epoch > f.epoch && !f.arrived.iter().any(|&a| a)) {
            // First arrival (after a restart, possibly at a later epoch), or every rank
            // moved on from an epoch nobody is waiting in.
            f.epoch = epoch;
        }
        if epoch < f.epoch {
            // A retry of a fence that completed (its answer was lost): answer again.
            return FenceStep::Done(Arc::new(f.kvs.clone()));
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
            FenceStep::Complete(Arc::new(f.kvs.clone()))
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
        let mut s = JobMessaging::new(3);
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
    fn a_rank_that_holds_the_last_fence_gets_only_what_changed_since() {
        let mut s = JobMessaging::new(2);
        s.fence(0, 1, kv("a", "0"));
        let first = match s.fence(1, 1, kv("b", "1")) {
            FenceStep::Complete(kvs) => kvs,
            w => panic!("{w:?}"),
        };
        assert_eq!(
            first.answer(0),
            (
                BTreeMap::from([("a".into(), "0".into()), ("b".into(), "1".into())]),
                false
            )
        );
        // Fence 2: both send their cumulative puts again, rank 1 with a new value.
        s.fence(0, 2, kv("a", "0"));
        let mut b = kv("b", "2");
        b.insert("c".into(), "3".into());
        let second = match s.fence(1, 2, b) {
            FenceStep::Complete(kvs) => kvs,
            w => panic!("{w:?}"),
        };
        let (delta, is_delta) = second.answer(1);
        assert!(is_delta);
        assert_eq!(
            delta,
            BTreeMap::from([("b".into(), "2".into()), ("c".into(), "3".into())])
        );
        // Nothing new at fence 3: an empty delta; a rank that holds nothing gets it all.
        s.fence(0, 3, kv("a", "0"));
        let third = match s.fence(1, 3, kv("b", "2")) {
            FenceStep::Complete(kvs) => kvs,
            w => panic!("{w:?}"),
        };
        assert_eq!(third.answer(2), (BTreeMap::new(), true));
        assert_eq!(third.answer(0).0.len(), 3);
    }

    #[test]
    fn a_restarted_master_rebuilds_the_space_from_retries() {
        let mut s = JobMessaging::new(2);
        assert_eq!(s.fence(1, 4, kv("b", "1")), FenceStep::Wait { epoch: 4 });
        match s.fence(0, 4, kv("a", "0")) {
            FenceStep::Complete(kvs) => assert_eq!(kvs.len(), 2),
            w => panic!("{w:?}"),
        }
    }

    #[test]
    fn stale_reports_are_not_checked() {
        let mut s = JobMessaging::new(2);
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
