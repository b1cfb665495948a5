//! Global-state deadlock detection for jobs that talk through the messaging library
//! (`gang-msg`), and the words of its per-job settings.
//!
//! A job is deadlocked when every rank is blocked in a receive and nothing is in flight.
//! Each rank's library counts the messages it *posted* (accepted from the program, queued
//! ones included) and those *delivered* into its buffers. Per sender and receiver,
//! delivered <= posted, so equal sums over the job mean every pair is matched: nothing is
//! on its way that could wake a blocked rank. Reports from different ranks are not read at
//! one instant, so one such picture proves nothing; the same picture (every rank blocked
//! since the same moment, every counter unchanged) at two consecutive checks, each from
//! reports all sent after the check before, does: no rank moved in between, and none
//! could have.
//!
//! A rank that computes, sleeps or reads stdin is not blocked in a receive, so its job is
//! never flagged; nor is a job with a message still queued by a switched-out sender.
//! Time is not an input: there is no timeout to tune.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What one rank is doing, from its library's state page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    pub rank: u32,
    /// Blocked in a receive since (ns on the master clock); 0 = not blocked.
    pub blocked_since_ns: i64,
    /// What it waits for; -1 = any.
    pub source: i32,
    pub tag: i32,
    pub posted: u64,
    pub delivered: u64,
}

/// Where a job stands after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some rank is not blocked, or something is in flight, or a rank never reported.
    Active,
    /// Stuck at this check; deadlocked if the next one sees the same.
    Suspect,
    /// Stuck, and the same at two consecutive checks.
    Deadlocked,
}

/// The checks of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadlockCheck {
    /// The stuck picture of the previous check, by rank.
    last: Option<Vec<Activity>>,
}

/// Whether `ranks` (one per rank 0..size, in rank order) shows a stuck job.
pub fn stuck(size: u32, ranks: &[Activity]) -> bool {
    let covered =
        ranks.len() == size as usize && ranks.iter().enumerate().all(|(i, a)| a.rank as usize == i);
    let posted: u128 = ranks.iter().map(|a| u128::from(a.posted)).sum();
    let delivered: u128 = ranks.iter().map(|a| u128::from(a.delivered)).sum();
    size > 0 && covered && ranks.iter().all(|a| a.blocked_since_ns != 0) && posted == delivered
}

impl DeadlockCheck {
    /// One check over the latest report of each rank, every one of them sent after the
    /// previous check (the caller makes sure; stale reports must not be checked twice).
    pub fn check(&mut self, size: u32, ranks: &[Activity]) -> Verdict {
        if !stuck(size, ranks) {
            self.last = None;
            return Verdict::Active;
        }
        if self.last.as_deref() == Some(ranks) {
            return Verdict::Deadlocked;
        }
        self.last = Some(ranks.to_vec());
        Verdict::Suspect
    }
}

/// What the master does with a deadlocked job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlockPolicy {
    /// Flag it (job info, prun, a metric) and let it be.
    #[default]
    Report,
    /// Flag it and fail the job.
    Kill,
}

impl DeadlockPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadlockPolicy::Report => "report",
            DeadlockPolicy::Kill => "kill",
        }
    }
}

impl fmt::Display for DeadlockPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown deadlock policy {0:?}: expected report or kill")]
pub struct UnknownPolicy(pub String);

impl FromStr for DeadlockPolicy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "report" => Ok(DeadlockPolicy::Report),
            "kill" => Ok(DeadlockPolicy::Kill),
            _ => Err(UnknownPolicy(s.into())),
        }
    }
}

/// How the messaging library keeps a switched-out job's network context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MsgContext {
    /// Each job keeps its buffers and connections; a switch flips which is active.
    #[default]
    Resident,
    /// Copied out of the transport at switch-out and back in at switch-in.
    SaveRestore,
}

impl MsgContext {
    pub fn as_str(self) -> &'static str {
        match self {
            MsgContext::Resident => "resident",
            MsgContext::SaveRestore => "save-restore",
        }
    }
}

impl fmt::Display for MsgContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown context mode {0:?}: expected resident or save-restore")]
pub struct UnknownContext(pub String);

impl FromStr for MsgContext {
    type Err = UnknownContext;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "resident" => Ok(MsgContext::Resident),
            "save-restore" | "save_restore" => Ok(MsgContext::SaveRestore),
            _ => Err(UnknownContext(s.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn blocked(rank: u32, since: i64, posted: u64, delivered: u64) -> Activity {
        Activity {
            rank,
            blocked_since_ns: since,
            source: (rank as i32 + 1) % 3,
            tag: 0,
            posted,
            delivered,
        }
    }

    #[test]
    fn the_same_stuck_picture_twice_is_a_deadlock() {
        let ranks = [
            blocked(0, 5, 2, 1),
            blocked(1, 6, 1, 2),
            blocked(2, 7, 0, 0),
        ];
        let mut c = DeadlockCheck::default();
        assert_eq!(c.check(3, &ranks), Verdict::Suspect);
        assert_eq!(c.check(3, &ranks), Verdict::Deadlocked);
        assert_eq!(c.check(3, &ranks), Verdict::Deadlocked);
    }

    #[test]
    fn a_moving_job_is_never_flagged() {
        let mut c = DeadlockCheck::default();
        // Blocked anew between the checks (it received, then blocked again).
        let a = [blocked(0, 5, 1, 1), blocked(1, 6, 1, 1)];
        let b = [blocked(0, 9, 2, 2), blocked(1, 6, 2, 2)];
        for _ in 0..10 {
            assert_eq!(c.check(2, &a), Verdict::Suspect);
            assert_eq!(c.check(2, &b), Verdict::Suspect);
        }
    }

    #[test]
    fn in_flight_or_running_or_unreported_ranks_are_active() {
        let mut c = DeadlockCheck::default();
        // A message posted and not delivered (e.g. queued by a switched-out sender).
        let inflight = [blocked(0, 5, 1, 0), blocked(1, 6, 0, 0)];
        // A rank computing, sleeping or reading stdin.
        let running = [blocked(0, 5, 0, 0), blocked(1, 0, 0, 0)];
        // Rank 1 never reported (it does not use the library).
        let partial = [blocked(0, 5, 0, 0)];
        for _ in 0..3 {
            assert_eq!(c.check(2, &inflight), Verdict::Active);
            assert_eq!(c.check(2, &running), Verdict::Active);
            assert_eq!(c.check(2, &partial), Verdict::Active);
        }
        // An activity in between resets the count.
        let stuck_ = [blocked(0, 5, 0, 0), blocked(1, 6, 0, 0)];
        assert_eq!(c.check(2, &stuck_), Verdict::Suspect);
        assert_eq!(c.check(2, &running), Verdict::Active);
        assert_eq!(c.check(2, &stuck_), Verdict::Suspect);
        assert_eq!(c.check(0, &[]), Verdict::Active);
    }

    #[test]
    fn words() {
        for p in [DeadlockPolicy::Report, DeadlockPolicy::Kill] {
            assert_eq!(p.to_string().parse::<DeadlockPolicy>(), Ok(p));
        }
        for m in [MsgContext::Resident, MsgContext::SaveRestore] {
            assert_eq!(m.to_string().parse::<MsgContext>(), Ok(m));
        }
        assert!("hang".parse::<DeadlockPolicy>().is_err());
    }

    proptest! {
        /// Whatever the counters, a job where any rank is not blocked, or where the sums
        /// differ, is never flagged however often it is checked.
        #[test]
        fn never_flagged_unless_stuck(
            ranks in prop::collection::vec((0i64..3, 0u64..4, 0u64..4), 1..6),
            checks in 1usize..5,
        ) {
            let acts: Vec<Activity> = ranks
                .iter()
                .enumerate()
                .map(|(i, &(since, p, d))| blocked(i as u32, since, p, d))
                .collect();
            let mut c = DeadlockCheck::default();
            let mut last = Verdict::Active;
            for _ in 0..checks {
                last = c.check(acts.len() as u32, &acts);
            }
            if !stuck(acts.len() as u32, &acts) {
                prop_assert_eq!(last, Verdict::Active);
            } else if checks >= 2 {
                prop_assert_eq!(last, Verdict::Deadlocked);
            }
        }
    }
}
