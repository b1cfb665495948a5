//! The master's lease: how long this agent's ranks run without the master.
//!
//! While the master is silent (paused, swapping, restarting, failing over, or cut off from
//! this node), the agent keeps its ranks running and switching on its last table, and
//! keeps trying to reach the master. Only when no answer came for the lease the master
//! states at registration (`agent_lease_ms`, minutes by default, as Slurm's
//! SlurmdTimeout) does it stop them, the way a master-ordered kill does: by then the
//! master, had it been up and hearing others, gave this node up long ago, and no rank
//! should run unsupervised for ever. Their exit reports wait in the outbox and reach the
//! master when it is back; when it answers before the lease is out, registration tells
//! which jobs ended meanwhile, and only their ranks are killed.
//!
//! How it relates to the master's node timeout: the master gives a silent node up after
//! `node_timeout_ms` (and only when it was itself responsive and heard other agents
//! meanwhile), fails the jobs that had ranks there, and places nothing on the node until
//! its agent registers again, which is when those ranks are killed. So the lease need not
//! end before the master could reuse the node: it never does so while the agent is away.
//! An older master that states no lease: the lease is its node timeout plus one heartbeat
//! period (the master measures silence from the last heartbeat it received, the agent from
//! the last answer it got, which is later, so the agent never stops first).
//!
//! A master that is *down* is not a master that is *away*. When the master's host refuses
//! the connection (nothing listens: the master crashed and systemd is restarting it),
//! this node is not cut off, and nobody can have failed its jobs: a master only fails jobs
//! while it runs, and a restarted one adopts the ranks its agents report. So a refusal
//! counts as contact, and ranks keep running for as long as the master is down.
//!
//! Like `clock`, this module imports nothing of the agent: the session reports contact
//! (`registered`, `heard`), and `watch` is given the stopping as a function (`agent.rs`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{info, warn};

/// What the master said at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Terms {
    /// The lease; None from an older master (then the node timeout and one period).
    lease: Option<Duration>,
    node_timeout: Duration,
    heartbeat: Duration,
    /// Quiet liveness: the idle node timeout and idle heartbeat, which hold while the
    /// node runs no rank. A call of the master (a launch) counts as its answer, so a node
    /// given work after a long idle silence is not stopped at once: the master counts the
    /// silence of a busy node from its placement, which comes before that call.
    idle: Option<(Duration, Duration)>,
}

impl Terms {
    fn bound(&self, busy: bool) -> Duration {
        if let Some(lease) = self.lease {
            return lease;
        }
        match self.idle {
            Some((timeout, heartbeat)) if !busy => timeout + heartbeat,
            _ => self.node_timeout + self.heartbeat,
        }
    }
}

/// The master's liveness terms, as sent at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// How long ranks run without an answer; None: the master sent none (an older
    /// master), then `node_timeout` and one heartbeat.
    pub lease: Option<Duration>,
    /// None: the master sent none (an older master): nothing is stopped.
    pub node_timeout: Option<Duration>,
    pub heartbeat: Duration,
    /// None: the master expects heartbeats every period whatever the node runs.
    pub idle: Option<(Duration, Duration)>,
}

#[derive(Debug, Default)]
struct State {
    /// When the master last answered.
    heard: Option<Instant>,
    /// None before the first registration, or if the master sent no node timeout (an
    /// older master): then nothing is stopped.
    terms: Option<Terms>,
    /// Counts answers, so the watch can tell whether one came while it slept.
    answers: u64,
    /// The last failed call was refused by the master's host: the master is down, and the
    /// lease waits until a call fails otherwise (or is answered).
    master_down: bool,
}

#[derive(Debug, Default)]
pub struct Lease {
    state: Mutex<State>,
    changed: Notify,
}

impl Lease {
    pub fn new() -> Arc<Lease> {
        Arc::new(Lease::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A registration was accepted at `at`, with the master's liveness terms.
    pub fn registered(&self, at: Instant, terms: Liveness) {
        let mut s = self.lock();
        s.terms = terms.node_timeout.map(|node_timeout| Terms {
            lease: terms.lease,
            node_timeout,
            heartbeat: terms.heartbeat,
            idle: terms.idle,
        });
        s.heard = Some(at);
        s.answers += 1;
        drop(s);
        self.changed.notify_waiters();
    }

    /// A heartbeat was answered (by a master that knew this node) at `at`, or the master
    /// called (a launch).
    pub fn heard(&self, at: Instant) {
        self.contact(at, false);
    }

    fn contact(&self, at: Instant, master_down: bool) {
        let mut s = self.lock();
        s.heard = Some(s.heard.map_or(at, |h| h.max(at)));
        s.answers += 1;
        s.master_down = master_down;
        drop(s);
        self.changed.notify_waiters();
    }

    /// The master's host refused the connection at `at`: the master is down (restarting),
    /// and this node is not cut off. The lease holds until a call fails otherwise.
    pub fn refused(&self, at: Instant) {
        self.contact(at, true);
    }

    /// A call failed without an answer from the master's host (a timeout, no route): the
    /// silence counts again, from the last contact.
    pub fn unanswered(&self) {
        let mut s = self.lock();
        if s.master_down {
            s.master_down = false;
            drop(s);
            self.changed.notify_waiters();
        }
    }

    /// When the lease runs out unless the master answers before, for a node that runs
    /// ranks (`busy`) or none.
    pub fn deadline(&self, busy: bool) -> Option<Instant> {
        let s = self.lock();
        deadline(&s, busy)
    }
}

fn deadline(s: &State, busy: bool) -> Option<Instant> {
    if s.master_down {
        return None;
    }
    let t = s.terms?;
    Some(s.heard? + t.bound(busy))
}

/// Watch the lease until aborted: when it runs out, call `stop` (which stops every rank and
/// returns the jobs it stopped) once, then wait for the master to answer again. `busy`
/// says whether the node runs ranks now (the idle terms hold while it runs none).
pub async fn watch(lease: Arc<Lease>, busy: impl Fn() -> bool, mut stop: impl FnMut() -> Vec<u64>) {
    // An idle node is given ranks only by a launch, which is also an answer: the wait
    // below is woken by it and the bound worked out again.
    loop {
        let changed = lease.changed.notified();
        tokio::pin!(changed);
        // Interest first, then the state: an answer in between is not missed.
        changed.as_mut().enable();
        let was_busy = busy();
        let (due, answers, terms, heard) = {
            let s = lease.lock();
            (deadline(&s, was_busy), s.answers, s.terms, s.heard)
        };
        let (Some(due), Some(terms), Some(heard)) = (due, terms, heard) else {
            changed.await;
            continue;
        };
        tokio::select! {
            _ = &mut changed => continue,
            _ = tokio::time::sleep_until(due) => {}
        }
        // Its ranks ended meanwhile: the idle bound holds now.
        if lease.lock().answers != answers || busy() != was_busy {
            continue;
        }
        let jobs = stop();
        let silent_ms = heard.elapsed().as_millis() as u64;
        let lease_ms = terms.bound(was_busy).as_millis() as u64;
        if jobs.is_empty() {
            warn!(
                silent_ms,
                lease_ms,
                "the master has not answered for its whole lease: no ranks here to stop; still trying to register"
            );
        } else {
            warn!(
                silent_ms,
                lease_ms,
                ?jobs,
                "the master has not answered for its whole lease: stopping the ranks here so that none runs unsupervised (their exits are reported when it is back); still trying to register"
            );
        }
        // Once per silence.
        changed.await;
        info!("the master answers again: the lease holds again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const T: Duration = Duration::from_millis(300);
    const P: Duration = Duration::from_millis(50);
    const MS: Duration = Duration::from_millis(1);

    /// Let the watch task run at the current (paused) instant.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn terms(node_timeout: Option<Duration>, heartbeat: Duration) -> Liveness {
        Liveness {
            lease: None,
            node_timeout,
            heartbeat,
            idle: None,
        }
    }

    /// A watch on a node that runs ranks while `busy` holds.
    fn start_with(
        busy: Arc<AtomicBool>,
    ) -> (Arc<Lease>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let lease = Lease::new();
        let falls = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(watch(
            Arc::clone(&lease),
            move || busy.load(Ordering::SeqCst),
            {
                let falls = Arc::clone(&falls);
                move || {
                    falls.fetch_add(1, Ordering::SeqCst);
                    vec![7]
                }
            },
        ));
        (lease, falls, task)
    }

    fn start() -> (Arc<Lease>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        start_with(Arc::new(AtomicBool::new(true)))
    }

    #[tokio::test(start_paused = true)]
    async fn falls_once_after_timeout_plus_period_and_rearms_on_an_answer() {
        let (lease, falls, task) = start();
        // Nothing is stopped before the master set its terms.
        tokio::time::sleep(T * 10).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);

        let t0 = Instant::now();
        lease.registered(t0, terms(Some(T), P));
        tokio::time::sleep_until(t0 + 100 * MS).await;
        lease.heard(Instant::now());
        assert_eq!(lease.deadline(true), Some(t0 + 100 * MS + T + P));
        tokio::time::sleep_until(t0 + 100 * MS + T + P - MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0, "fell early");
        tokio::time::sleep_until(t0 + 100 * MS + T + P + MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);
        // Still silent: not again.
        tokio::time::sleep(T * 5).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);

        // Registered again: armed again, from then.
        let t1 = Instant::now();
        lease.registered(t1, terms(Some(T), P));
        settle().await;
        tokio::time::sleep_until(t1 + T + P - MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);
        tokio::time::sleep_until(t1 + T + P + MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 2);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn answers_in_time_keep_it_up_and_no_timeout_means_no_stop() {
        let (lease, falls, task) = start();
        lease.registered(Instant::now(), terms(Some(T), P));
        // Heartbeats answered every period for a long while.
        for _ in 0..100 {
            tokio::time::sleep(P).await;
            lease.heard(Instant::now());
            settle().await;
        }
        assert_eq!(falls.load(Ordering::SeqCst), 0);

        // A master that states no timeout: its silence is not judged.
        lease.registered(Instant::now(), terms(None, P));
        assert_eq!(lease.deadline(true), None);
        tokio::time::sleep(T * 20).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_master_that_is_down_holds_the_lease_until_a_call_goes_unanswered() {
        let (lease, falls, task) = start();
        let t0 = Instant::now();
        lease.registered(t0, terms(Some(T), P));
        // Refused (the master restarts): however long, nothing falls.
        tokio::time::sleep(P).await;
        lease.refused(Instant::now());
        assert_eq!(lease.deadline(true), None);
        tokio::time::sleep(T * 20).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        // Then a call goes unanswered (the link is cut): the silence counts from the last
        // contact, which is long past, so the lease runs out at once.
        lease.unanswered();
        assert_eq!(lease.deadline(true), Some(t0 + P + T + P));
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);
        task.abort();
    }

    /// Quiet liveness: idle, the node waits the idle bound; given ranks by a launch (an
    /// answer), the busy bound counts from that call; once they end, the idle one again.
    #[tokio::test(start_paused = true)]
    async fn an_idle_node_waits_the_idle_bound_and_a_launch_rearms_the_busy_one() {
        const IT: Duration = Duration::from_millis(3000);
        const IP: Duration = Duration::from_millis(1000);
        let busy = Arc::new(AtomicBool::new(false));
        let (lease, falls, task) = start_with(Arc::clone(&busy));
        let t0 = Instant::now();
        lease.registered(
            t0,
            Liveness {
                lease: None,
                node_timeout: Some(T),
                heartbeat: P,
                idle: Some((IT, IP)),
            },
        );
        assert_eq!(lease.deadline(false), Some(t0 + IT + IP));
        // Silent far past the busy bound: an idle node is not stopped.
        tokio::time::sleep_until(t0 + IT).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        // A launch: the master called, and the node runs ranks from now on.
        let t1 = Instant::now();
        busy.store(true, Ordering::SeqCst);
        lease.heard(t1);
        tokio::time::sleep_until(t1 + T + P - MS).await;
        settle().await;
        assert_eq!(
            falls.load(Ordering::SeqCst),
            0,
            "fell before the busy bound"
        );
        tokio::time::sleep_until(t1 + T + P + MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);
        // Answered again; the ranks end; silence then counts against the idle bound.
        let t2 = Instant::now();
        lease.heard(t2);
        busy.store(false, Ordering::SeqCst);
        tokio::time::sleep_until(t2 + T + P + MS).await;
        settle().await;
        assert_eq!(
            falls.load(Ordering::SeqCst),
            1,
            "an idle node fell at the busy bound"
        );
        tokio::time::sleep_until(t2 + IT + IP + MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 2);
        task.abort();
    }

    /// A lease from the master: the ranks run through a silence far longer than the node
    /// timeout, busy or idle, and stop only once the lease is out; any answer renews it.
    #[tokio::test(start_paused = true)]
    async fn a_stated_lease_keeps_ranks_through_a_long_silence_and_only_then_stops_them() {
        const LEASE: Duration = Duration::from_secs(300);
        let (lease, falls, task) = start();
        let t0 = Instant::now();
        lease.registered(
            t0,
            Liveness {
                lease: Some(LEASE),
                node_timeout: Some(T),
                heartbeat: P,
                idle: Some((Duration::from_secs(18), Duration::from_secs(5))),
            },
        );
        assert_eq!(lease.deadline(true), Some(t0 + LEASE));
        assert_eq!(lease.deadline(false), Some(t0 + LEASE));
        // A master paused for a minute: calls go unanswered, nothing stops.
        tokio::time::sleep(Duration::from_secs(60)).await;
        lease.unanswered();
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        // It answers again: the lease counts from then.
        let t1 = Instant::now();
        lease.heard(t1);
        settle().await;
        tokio::time::sleep_until(t1 + LEASE - MS).await;
        settle().await;
        assert_eq!(
            falls.load(Ordering::SeqCst),
            0,
            "stopped before the lease was out"
        );
        tokio::time::sleep_until(t1 + LEASE + MS).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 1);
        task.abort();
    }
}
