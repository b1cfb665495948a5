//! The one place where the agent keeps which ranks it has and what state they are in.
//!
//! A std `Mutex` guards it and is never held across an `.await`: every method does its
//! bookkeeping (and at most a few non-blocking `kill(2)` calls) and returns.
//!
//! A rank's life: `Starting` (reserved by a Launch that is spawning it) -> `Running` (its
//! process group exists; signals go to it; `Simulated` on an emulated node, where a task
//! plays the rank) -> `Exited` (reaped; its exit report is queued)
//! -> removed once the master has acknowledged the exit. Keeping `Exited` entries until the
//! ack makes a re-Launch of the same (job, rank) a duplicate and lets a late Stdin to a
//! finished rank succeed quietly instead of failing as an unknown job.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::guard::Guard;

/// One rank of one job. A node runs at most one incarnation of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RankKey {
    pub job_id: u64,
    pub rank: u32,
}

/// What the Stdin RPC hands to a rank's stdin writer, in order.
#[derive(Debug)]
pub enum StdinMsg {
    Data(Vec<u8>),
    Eof,
}

#[derive(Debug)]
enum Phase {
    /// Reserved by a Launch still spawning. A Signal arriving now cannot reach a process
    /// yet; it is remembered (the shortest grace wins) and applied once the group exists.
    Starting { pending_kill: Option<Duration> },
    /// The process group `pgid` (= the rank's pid) is ours to signal.
    Running { pgid: Pid },
    /// A simulated rank of an emulated node (no process): signals go to its task.
    Simulated {
        signals: mpsc::UnboundedSender<Signal>,
    },
    /// Reaped; waiting for the master to acknowledge the exit report.
    Exited,
}

#[derive(Debug)]
struct Entry {
    phase: Phase,
    stdin: Option<mpsc::Sender<StdinMsg>>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<RankKey, Entry>,
    /// Set at shutdown: no new launches.
    closing: bool,
}

/// Why a launch could not reserve its (job, rank).
#[derive(Debug, PartialEq, Eq)]
pub enum ReserveError {
    Duplicate,
    Closing,
}

/// Where the Stdin RPC should write for a job.
#[derive(Debug)]
pub enum StdinTarget {
    /// No rank of the job is (or was, unacknowledged) here.
    UnknownJob,
    /// The job's ranks here have no stdin pipe (not rank 0, or already exited).
    Closed,
    Pipe(mpsc::Sender<StdinMsg>),
}

#[derive(Debug, Default)]
pub struct Ranks {
    inner: Mutex<Inner>,
    /// Woken whenever a rank is reaped or forgotten (shutdown waits on it).
    changed: Notify,
    /// Kills the ranks' groups if the agent dies (none for agents run in-process).
    guard: OnceLock<Arc<Guard>>,
}

impl Ranks {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// From now on every rank's process group is reported to `guard`.
    pub fn set_guard(&self, guard: Arc<Guard>) {
        let _ = self.guard.set(guard);
    }

    /// The group of a reaped rank was swept: the guard may forget it.
    pub fn swept(&self, pgid: Pid) {
        if let Some(g) = self.guard.get() {
            g.release(pgid);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters more than losing the agent: keep going with the data as it is.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reserve(&self, key: RankKey) -> Result<(), ReserveError> {
        let mut inner = self.lock();
        if inner.closing {
            return Err(ReserveError::Closing);
        }
        if inner.entries.contains_key(&key) {
            return Err(ReserveError::Duplicate);
        }
        inner.entries.insert(
            key,
            Entry {
                phase: Phase::Starting { pending_kill: None },
                stdin: None,
            },
        );
        Ok(())
    }

    /// The launch failed: free the reservation.
    pub fn unreserve(&self, key: RankKey) {
        let mut inner = self.lock();
        if matches!(
            inner.entries.get(&key).map(|e| &e.phase),
            Some(Phase::Starting { .. })
        ) {
            inner.entries.remove(&key);
        }
    }

    /// The rank's process (group) exists. Applies a Signal that arrived while it was
    /// being spawned, or a shutdown.
    pub fn started(
        self: &Arc<Self>,
        key: RankKey,
        pgid: Pid,
        stdin: Option<mpsc::Sender<StdinMsg>>,
    ) {
        let kill = self.begin(key, Phase::Running { pgid }, |entry| {
            entry.stdin = stdin;
            if let Some(g) = self.guard.get() {
                g.watch(pgid);
            }
        });
        if let Some(Some(grace)) = kill {
            self.terminate(vec![(key, pgid)], grace);
        }
    }

    /// A simulated rank's task runs (an emulated node): it is told of signals through
    /// `signals`, and applies a Signal that arrived while it was being started.
    pub fn started_simulated(&self, key: RankKey, signals: mpsc::UnboundedSender<Signal>) {
        let tell = signals.clone();
        if let Some(Some(grace)) = self.begin(key, Phase::Simulated { signals }, |_| {}) {
            let _ = tell.send(simulated_end(grace));
        }
    }

    /// A reserved rank has started: it moves to `phase` (and `with` runs, under the same
    /// lock). Returns None if it is no longer reserved, else the kill it owes now: a
    /// Signal that arrived while it was starting (the shortest grace), or the shutdown's.
    fn begin(
        &self,
        key: RankKey,
        phase: Phase,
        with: impl FnOnce(&mut Entry),
    ) -> Option<Option<Duration>> {
        let mut inner = self.lock();
        let closing = inner.closing;
        let entry = inner.entries.get_mut(&key)?;
        let pending = match entry.phase {
            Phase::Starting { pending_kill } => pending_kill,
            _ => None,
        };
        entry.phase = phase;
        with(entry);
        Some(if closing {
            Some(Duration::ZERO)
        } else {
            pending
        })
    }

    /// The rank was reaped. From now on its pgid is not ours: never signal it again
    /// (except the supervisor's own sweep of leftover group members, done right after).
    pub fn mark_exited(&self, key: RankKey) {
        let mut inner = self.lock();
        if let Some(entry) = inner.entries.get_mut(&key) {
            entry.phase = Phase::Exited;
            // Dropping the sender ends the stdin writer, which closes the pipe.
            entry.stdin = None;
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// The master acknowledged the rank's exit (or refused it for good): forget the rank.
    pub fn forget(&self, key: RankKey) {
        self.lock().entries.remove(&key);
        self.changed.notify_waiters();
    }

    /// Ranks alive (or being started) here, for Register and Heartbeat.
    pub fn running(&self) -> Vec<RankKey> {
        self.lock()
            .entries
            .iter()
            .filter(|(_, e)| !matches!(e.phase, Phase::Exited))
            .map(|(k, _)| *k)
            .collect()
    }

    /// Every rank known here, including exited ones whose report is not yet acknowledged.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_running(&self, key: RankKey) -> bool {
        self.lock()
            .entries
            .get(&key)
            .is_some_and(|e| !matches!(e.phase, Phase::Exited))
    }

    /// SIGCONT + SIGTERM to every process group of the job here, SIGKILL after `grace`
    /// (at once if zero). Returns whether any rank of the job is known here. Does not wait.
    pub fn signal_job(self: &Arc<Self>, job_id: u64, grace: Duration) -> bool {
        let mut found = false;
        let mut groups = Vec::new();
        {
            let mut inner = self.lock();
            for (key, entry) in inner.entries.range_mut(job_range(job_id)) {
                found = true;
                match &mut entry.phase {
                    Phase::Running { pgid } => groups.push((*key, *pgid)),
                    Phase::Starting { pending_kill } => {
                        *pending_kill = Some(pending_kill.map_or(grace, |g| g.min(grace)));
                    }
                    Phase::Simulated { signals } => {
                        let _ = signals.send(simulated_end(grace));
                    }
                    Phase::Exited => {}
                }
            }
        }
        self.terminate(groups, grace);
        found
    }

    fn terminate(self: &Arc<Self>, groups: Vec<(RankKey, Pid)>, grace: Duration) {
        if groups.is_empty() {
            return;
        }
        if grace.is_zero() {
            for (_, pgid) in &groups {
                signal_group(*pgid, Signal::SIGKILL);
            }
            return;
        }
        for (_, pgid) in &groups {
            // A stopped process (gang-switched out, or ^Z) holds SIGTERM pending until it
            // runs again: continue it first so that it can act on the TERM.
            signal_group(*pgid, Signal::SIGCONT);
            signal_group(*pgid, Signal::SIGTERM);
        }
        let ranks = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            ranks.kill_if_running(&groups);
        });
    }

    /// SIGKILL the groups of those ranks that are still running (same incarnation).
    fn kill_if_running(&self, groups: &[(RankKey, Pid)]) {
        // The lock is held across the kill so that a rank cannot be marked exited (and its
        // pid become reusable) between the check and the signal.
        let inner = self.lock();
        for (key, pgid) in groups {
            let same = matches!(
                inner.entries.get(key),
                Some(Entry { phase: Phase::Running { pgid: current }, .. }) if current == pgid
            );
            if same {
                debug!(job_id = key.job_id, rank = key.rank, "grace over: SIGKILL");
                signal_group(*pgid, Signal::SIGKILL);
            }
        }
    }

    /// Shutdown: refuse new launches and SIGKILL every rank's group now.
    pub fn kill_all(&self) {
        let mut inner = self.lock();
        inner.closing = true;
        for entry in inner.entries.values_mut() {
            match &mut entry.phase {
                Phase::Running { pgid } => signal_group(*pgid, Signal::SIGKILL),
                Phase::Simulated { signals } => {
                    let _ = signals.send(Signal::SIGKILL);
                }
                // `started` sees `closing` and kills it as soon as it exists.
                Phase::Starting { .. } | Phase::Exited => {}
            }
        }
    }

    pub fn stdin_target(&self, job_id: u64) -> StdinTarget {
        let inner = self.lock();
        let mut target = StdinTarget::UnknownJob;
        for (_, entry) in inner.entries.range(job_range(job_id)) {
            match &entry.stdin {
                Some(tx) => return StdinTarget::Pipe(tx.clone()),
                None => target = StdinTarget::Closed,
            }
        }
        target
    }

    /// Wait until no rank is starting or running (all reaped), or the deadline passes.
    pub async fn wait_none_running(&self, deadline: Instant) -> bool {
        self.wait_until(deadline, |r| r.running().is_empty()).await
    }

    /// Wait until every rank is forgotten (all exits acknowledged), or the deadline passes.
    pub async fn wait_empty(&self, deadline: Instant) -> bool {
        self.wait_until(deadline, Ranks::is_empty).await
    }

    async fn wait_until(&self, deadline: Instant, done: impl Fn(&Ranks) -> bool) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Register interest before checking, so a change in between is not missed.
            changed.as_mut().enable();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(self);
            }
        }
    }
}

/// How a simulated rank ends when signalled: on SIGTERM, as `sleep` does (no grace is
/// needed), or SIGKILL when there is none.
fn simulated_end(grace: Duration) -> Signal {
    if grace.is_zero() {
        Signal::SIGKILL
    } else {
        Signal::SIGTERM
    }
}

fn job_range(job_id: u64) -> std::ops::RangeInclusive<RankKey> {
    RankKey { job_id, rank: 0 }..=RankKey {
        job_id,
        rank: u32::MAX,
    }
}

/// Signal a process group; a group that is already gone is not an error.
pub fn signal_group(pgid: Pid, signal: Signal) {
    match killpg(pgid, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => warn!(pgid = pgid.as_raw(), %signal, "cannot signal process group: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(job_id: u64, rank: u32) -> RankKey {
        RankKey { job_id, rank }
    }

    #[test]
    fn reserve_is_exclusive_until_forgotten() {
        let ranks = Ranks::new();
        assert_eq!(ranks.reserve(key(1, 0)), Ok(()));
        assert_eq!(ranks.reserve(key(1, 0)), Err(ReserveError::Duplicate));
        ranks.unreserve(key(1, 0));
        assert_eq!(ranks.reserve(key(1, 0)), Ok(()));
        ranks.mark_exited(key(1, 0));
        assert!(ranks.running().is_empty());
        assert_eq!(ranks.reserve(key(1, 0)), Err(ReserveError::Duplicate));
        ranks.forget(key(1, 0));
        assert!(ranks.is_empty());
    }

    #[test]
    fn closing_refuses_launches() {
        let ranks = Ranks::new();
        ranks.kill_all();
        assert_eq!(ranks.reserve(key(1, 0)), Err(ReserveError::Closing));
    }

    #[tokio::test]
    async fn signal_job_reports_found_per_job() {
        let ranks = Ranks::new();
        ranks.reserve(key(7, 3)).unwrap();
        assert!(ranks.signal_job(7, Duration::from_millis(5)));
        assert!(!ranks.signal_job(8, Duration::ZERO));
        assert!(matches!(ranks.stdin_target(8), StdinTarget::UnknownJob));
        assert!(matches!(ranks.stdin_target(7), StdinTarget::Closed));
    }

    #[tokio::test]
    async fn a_simulated_rank_is_told_of_signals_that_came_while_it_started_and_after() {
        let ranks = Ranks::new();
        ranks.reserve(key(3, 0)).unwrap();
        assert!(ranks.signal_job(3, Duration::from_secs(1)));
        let (tx, mut rx) = mpsc::unbounded_channel();
        ranks.started_simulated(key(3, 0), tx);
        assert_eq!(rx.try_recv(), Ok(Signal::SIGTERM));
        assert!(ranks.is_running(key(3, 0)));
        ranks.kill_all();
        assert_eq!(rx.try_recv(), Ok(Signal::SIGKILL));
    }
}
