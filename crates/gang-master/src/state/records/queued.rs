//! What each user has queued: how many jobs, and how many bytes their specs hold (the
//! commands, environments, names and paths the master keeps for them). Both are bounded
//! per user (`max_queued_per_user`, `max_queued_bytes_per_user`), so no user can make the
//! master hold more than its share, however they submit.
//!
//! A spec is counted once however many queued jobs share it (an array's tasks do), by
//! the address of its `Arc`: an array of a thousand tasks of a 1 MiB environment costs
//! 1 MiB, and a task that gets a spec of its own (an update of its name) costs it again.
//!
//! Kept as jobs change (`MasterState::save`), with an undo journal so that a round taken
//! back takes its counts back too; never found by scanning the queue.

use std::collections::HashMap;
use std::sync::Arc;

use crate::job::{Spec, Stage};

/// One user's queued jobs and the bytes they hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserQueued {
    pub jobs: usize,
    pub bytes: u64,
    /// The distinct specs of their queued jobs: how many jobs hold each, and its size.
    specs: HashMap<usize, (u32, u64)>,
}

/// One change, to take back.
#[derive(Debug)]
enum Undo {
    Charged { uid: u32, key: usize, bytes: u64 },
    Uncharged { uid: u32, key: usize, bytes: u64 },
}

#[derive(Debug, Default)]
pub struct Queued {
    users: HashMap<u32, UserQueued>,
    /// While a round runs: what it changed, last last.
    undo: Vec<Undo>,
}

/// The bytes a spec makes the master hold for it (as submitted, or as kept).
pub fn spec_bytes<S: Stage>(s: &Spec<S>) -> u64 {
    let argv: usize = s.argv.iter().map(|a| a.len() + 1).sum::<usize>()
        + s.script.as_ref().map_or(0, |b| b.text.len());
    let env: usize = s.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    (argv
        + env
        + s.name.len()
        + s.cwd.len()
        + s.shape.len()
        + s.output_files.output.len()
        + s.output_files.error.len()) as u64
}

fn key(spec: &Arc<Spec>) -> usize {
    Arc::as_ptr(spec) as usize
}

impl Queued {
    /// A user's counts (zero if they have nothing queued).
    pub fn of(&self, uid: u32) -> (usize, u64) {
        self.users.get(&uid).map_or((0, 0), |u| (u.jobs, u.bytes))
    }

    /// A job of `uid` holding `spec` is queued now.
    pub fn charge(&mut self, uid: u32, spec: &Arc<Spec>) {
        let bytes = spec_bytes(spec);
        let k = key(spec);
        self.apply(uid, k, bytes, 1);
        self.undo.push(Undo::Charged { uid, key: k, bytes });
    }

    /// A job of `uid` holding `spec` is no longer queued.
    pub fn uncharge(&mut self, uid: u32, spec: &Arc<Spec>) {
        let k = key(spec);
        let bytes = self
            .users
            .get(&uid)
            .and_then(|u| u.specs.get(&k))
            .map_or(0, |&(_, b)| b);
        self.apply(uid, k, bytes, -1);
        self.undo.push(Undo::Uncharged { uid, key: k, bytes });
    }

    fn apply(&mut self, uid: u32, k: usize, bytes: u64, delta: i32) {
        let u = self.users.entry(uid).or_default();
        if delta > 0 {
            u.jobs += 1;
            let e = u.specs.entry(k).or_insert((0, bytes));
            if e.0 == 0 {
                u.bytes += bytes;
            }
            e.0 += 1;
        } else {
            u.jobs = u.jobs.saturating_sub(1);
            if let Some(e) = u.specs.get_mut(&k) {
                e.0 -= 1;
                if e.0 == 0 {
                    u.bytes -= e.1;
                    u.specs.remove(&k);
                }
            }
            if u.jobs == 0 {
                self.users.remove(&uid);
            }
        }
    }

    /// A round begins: what `rollback` returns to.
    pub fn begin(&mut self) {
        self.undo.clear();
    }

    /// The round was taken back.
    pub fn rollback(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Charged { uid, key, bytes } => self.apply(uid, key, bytes, -1),
                Undo::Uncharged { uid, key, bytes } => self.apply(uid, key, bytes, 1),
            }
        }
    }

    /// Every user's counts, for the sanity check (recounted from the jobs there).
    pub fn users(&self) -> impl Iterator<Item = (u32, usize, u64)> + '_ {
        self.users.iter().map(|(&u, q)| (u, q.jobs, q.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::testkit::new_job;

    fn spec(env_bytes: usize) -> Arc<Spec> {
        let mut j = new_job("1x1", 1000, 0);
        j.env.insert("X".into(), "y".repeat(env_bytes));
        Arc::new(j.resolve(crate::job::Defaults {
            gang: Default::default(),
            on_deadlock: Default::default(),
            mpi: crate::job::Mpi::CLUSTER_DEFAULT,
        }))
    }

    #[test]
    fn a_shared_spec_counts_once_and_a_round_taken_back_counts_nothing() {
        let mut q = Queued::default();
        let (a, b) = (spec(1_000_000), spec(10));
        q.begin();
        for _ in 0..1000 {
            q.charge(1000, &a);
        }
        let (jobs, bytes) = q.of(1000);
        assert_eq!(jobs, 1000);
        assert_eq!(bytes, spec_bytes(&a));
        q.charge(1000, &b);
        assert_eq!(q.of(1000).1, spec_bytes(&a) + spec_bytes(&b));
        q.begin();
        for _ in 0..999 {
            q.uncharge(1000, &a);
        }
        q.charge(1000, &spec(5));
        assert_eq!(q.of(1000).0, 3);
        q.rollback();
        assert_eq!(q.of(1000), (1001, spec_bytes(&a) + spec_bytes(&b)));
        q.begin();
        for _ in 0..1000 {
            q.uncharge(1000, &a);
        }
        q.uncharge(1000, &b);
        assert_eq!(q.of(1000), (0, 0));
        assert_eq!(q.users().count(), 0);
    }
}
