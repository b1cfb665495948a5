//! The fence: no rank runs unsupervised.
//!
//! The master counts a node lost when it has heard no heartbeat from it for
//! `node_timeout_ms` (sent at registration), and fails the jobs that had ranks there. From
//! then on nobody watches those ranks: the master has given up on them and may place their
//! nodes again. So an agent that has not heard the master answer (a registration, or a
//! heartbeat the master knew it by) for longer than that timeout plus one heartbeat period
//! stops all its ranks, the way a master-ordered kill does, and keeps trying to register.
//! Their exit reports wait in the outbox and reach the master when it is back.
//!
//! Why this bound: the master measures silence from the last heartbeat it *received*; the
//! agent from the last answer it *got*, which is later. So the agent never fences before
//! the master has given up; the extra period covers the master's own timer granularity.
//!
//! A master that is *down* is not a master that is *away*. When the master's host refuses
//! the connection (nothing listens: the master crashed and systemd is restarting it), this
//! node is not cut off, and nobody can have failed its jobs: a master only fails jobs
//! while it runs, and a restarted one adopts the ranks its agents report. So a refusal
//! counts as contact, and ranks keep running and switching on the last table for as long
//! as the master is down. Silence that proves nothing (no route, no answer: a cut link, a
//! dead host) is what the fence is for.
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
    node_timeout: Duration,
    heartbeat: Duration,
    /// Quiet liveness: the idle node timeout and idle heartbeat, which hold while the
    /// node runs no rank. A call of the master (a launch) counts as its answer, so a node
    /// given work after a long idle silence is not fenced at once: the master counts the
    /// silence of a busy node from its placement, which comes before that call.
    idle: Option<(Duration, Duration)>,
}

impl Terms {
    fn bound(&self, busy: bool) -> Duration {
        match self.idle {
            Some((timeout, heartbeat)) if !busy => timeout + heartbeat,
            _ => self.node_timeout + self.heartbeat,
        }
    }
}

/// The master's liveness terms, as sent at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// None: the master sent none (an older master): nothing is fenced.
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
    /// older master): then nothing is fenced.
    terms: Option<Terms>,
    /// Counts answers, so the watch can tell whether one came while it slept.
    answers: u64,
    /// The last failed call was refused by the master's host: the master is down, and the
    /// fence waits until a call fails otherwise (or is answered).
    master_down: bool,
}

#[derive(Debug, Default)]
pub struct Fence {
    state: Mutex<State>,
    changed: Notify,
}

impl Fence {
    pub fn new() -> Arc<Fence> {
        Arc::new(Fence::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A registration was accepted at `at`, with the master's liveness terms.
    pub fn registered(&self, at: Instant, terms: Liveness) {
        let mut s = self.lock();
        s.terms = terms.node_timeout.map(|node_timeout| Terms {
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
    /// and this node is not cut off. The fence stays up until a call fails otherwise.
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

    /// When the fence falls unless the master answers before, for a node that runs
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

/// Watch the fence until aborted: when it falls, call `stop` (which stops every rank and
/// returns the jobs it stopped) once, then wait for the master to answer again. `busy`
/// says whether the node runs ranks now (the idle terms hold while it runs none).
pub async fn watch(fence: Arc<Fence>, busy: impl Fn() -> bool, mut stop: impl FnMut() -> Vec<u64>) {
    // An idle node is given ranks only by a launch, which is also an answer: the wait
    // below is woken by it and the bound worked out again.
    loop {
        let changed = fence.changed.notified();
        tokio::pin!(changed);
        // Interest first, then the state: an answer in between is not missed.
        changed.as_mut().enable();
        let was_busy = busy();
        let (due, answers, terms, heard) = {
            let s = fence.lock();
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
        if fence.lock().answers != answers || busy() != was_busy {
            continue;
        }
        let jobs = stop();
        let silent_ms = heard.elapsed().as_millis() as u64;
        let node_timeout_ms = terms.node_timeout.as_millis() as u64;
        let heartbeat_ms = terms.heartbeat.as_millis() as u64;
        if jobs.is_empty() {
            warn!(
                silent_ms,
                node_timeout_ms,
                heartbeat_ms,
                "the master has not answered for longer than its node timeout plus a heartbeat period: it counts this node lost; no ranks here to stop; still trying to register"
            );
        } else {
            warn!(
                silent_ms,
                node_timeout_ms,
                heartbeat_ms,
                ?jobs,
                "the master has not answered for longer than its node timeout plus a heartbeat period: it counts this node lost and has failed these jobs; stopping their ranks here so that none runs unsupervised; still trying to register"
            );
        }
        // Once per silence.
        changed.await;
        info!("the master answers again: the fence is up");
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
            node_timeout,
            heartbeat,
            idle: None,
        }
    }

    /// A watch on a node that runs ranks while `busy` holds.
    fn start_with(
        busy: Arc<AtomicBool>,
    ) -> (Arc<Fence>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let fence = Fence::new();
        let falls = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(watch(
            Arc::clone(&fence),
            move || busy.load(Ordering::SeqCst),
            {
                let falls = Arc::clone(&falls);
                move || {
                    falls.fetch_add(1, Ordering::SeqCst);
                    vec![7]
                }
            },
        ));
        (fence, falls, task)
    }

    fn start() -> (Arc<Fence>, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        start_with(Arc::new(AtomicBool::new(true)))
    }

    #[tokio::test(start_paused = true)]
    async fn falls_once_after_timeout_plus_period_and_rearms_on_an_answer() {
        let (fence, falls, task) = start();
        // Nothing is fenced before the master set its terms.
        tokio::time::sleep(T * 10).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);

        let t0 = Instant::now();
        fence.registered(t0, terms(Some(T), P));
        tokio::time::sleep_until(t0 + 100 * MS).await;
        fence.heard(Instant::now());
        assert_eq!(fence.deadline(true), Some(t0 + 100 * MS + T + P));
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
        fence.registered(t1, terms(Some(T), P));
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
    async fn answers_in_time_keep_it_up_and_no_timeout_means_no_fence() {
        let (fence, falls, task) = start();
        fence.registered(Instant::now(), terms(Some(T), P));
        // Heartbeats answered every period for a long while.
        for _ in 0..100 {
            tokio::time::sleep(P).await;
            fence.heard(Instant::now());
            settle().await;
        }
        assert_eq!(falls.load(Ordering::SeqCst), 0);

        // A master that states no timeout: its silence is not judged.
        fence.registered(Instant::now(), terms(None, P));
        assert_eq!(fence.deadline(true), None);
        tokio::time::sleep(T * 20).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_master_that_is_down_holds_the_fence_until_a_call_goes_unanswered() {
        let (fence, falls, task) = start();
        let t0 = Instant::now();
        fence.registered(t0, terms(Some(T), P));
        // Refused (the master restarts): however long, nothing falls.
        tokio::time::sleep(P).await;
        fence.refused(Instant::now());
        assert_eq!(fence.deadline(true), None);
        tokio::time::sleep(T * 20).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        // Then a call goes unanswered (the link is cut): the silence counts from the last
        // contact, which is long past, so the fence falls at once.
        fence.unanswered();
        assert_eq!(fence.deadline(true), Some(t0 + P + T + P));
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
        let (fence, falls, task) = start_with(Arc::clone(&busy));
        let t0 = Instant::now();
        fence.registered(
            t0,
            Liveness {
                node_timeout: Some(T),
                heartbeat: P,
                idle: Some((IT, IP)),
            },
        );
        assert_eq!(fence.deadline(false), Some(t0 + IT + IP));
        // Silent far past the busy bound: an idle node is not fenced.
        tokio::time::sleep_until(t0 + IT).await;
        settle().await;
        assert_eq!(falls.load(Ordering::SeqCst), 0);
        // A launch: the master called, and the node runs ranks from now on.
        let t1 = Instant::now();
        busy.store(true, Ordering::SeqCst);
        fence.heard(t1);
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
        fence.heard(t2);
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
}
