//! How far each launch down the order tree has got: of the heads the master called, how
//! many answered, and of the ranks, how many started. Written by the relay tasks as the
//! heads answer (`relays`), read by attach streams (`prun -v`). What people watch, like
//! the metrics: not the state the actor owns, which learns of every rank by its command.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gang_core::JobId;

/// Launches remembered at once (the oldest forgotten first): a launch is watched while it
/// is under way, seconds to minutes.
const KEPT: usize = 256;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub heads_done: u32,
    pub heads: u32,
    pub ranks_started: u32,
    pub ranks: u32,
}

#[derive(Default)]
pub struct LaunchProgress(Mutex<BTreeMap<JobId, Progress>>);

impl LaunchProgress {
    /// A launch of `ranks` ranks went to `heads` heads.
    pub fn begin(&self, job: JobId, heads: usize, ranks: usize) {
        let mut m = self.0.lock().expect("launch progress lock");
        m.insert(
            job,
            Progress {
                heads: heads as u32,
                ranks: ranks as u32,
                ..Progress::default()
            },
        );
        while m.len() > KEPT {
            m.pop_first();
        }
    }

    /// One head answered for its subtree, `started` of whose ranks started.
    pub fn subtree_done(&self, job: JobId, started: usize) {
        if let Some(p) = self.0.lock().expect("launch progress lock").get_mut(&job) {
            p.heads_done = (p.heads_done + 1).min(p.heads);
            p.ranks_started = (p.ranks_started + started as u32).min(p.ranks);
        }
    }

    pub fn get(&self, job: JobId) -> Option<Progress> {
        self.0
            .lock()
            .expect("launch progress lock")
            .get(&job)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_ranks_add_up_and_old_launches_are_forgotten() {
        let p = LaunchProgress::default();
        p.begin(JobId(1), 16, 1024);
        p.subtree_done(JobId(1), 64);
        p.subtree_done(JobId(1), 60);
        p.subtree_done(JobId(2), 5);
        let got = p.get(JobId(1)).unwrap();
        assert_eq!((got.heads_done, got.heads), (2, 16));
        assert_eq!((got.ranks_started, got.ranks), (124, 1024));
        assert_eq!(p.get(JobId(2)), None);
        for j in 2..=(KEPT as u64 + 1) {
            p.begin(JobId(j), 1, 1);
        }
        assert_eq!(p.get(JobId(1)), None, "the oldest went first");
        assert!(p.get(JobId(KEPT as u64 + 1)).is_some());
    }
}
