//! The agent's view of the master clock: `master = agent CLOCK_REALTIME + offset`.
//!
//! With `clock = "probe"` (the default) an async task probes the master with NTP-style
//! four-timestamp probes (`AgentRegistry.ClockProbe`): a burst of probes 20 ms apart at
//! start, then one every `PERIOD`, doubling up to `clock_probe_max_ms` while the estimate
//! stays put (`gang_core::time::clock::ProbePacer`), keeping the minimum-round-trip
//! sample of the last `WINDOW` (`gang_core::time::clock::ClockEstimator`). Until the first probe
//! is answered the offset is 0 (the host clock), and the log says so. With
//! `clock = "host"` the host clock is trusted (chrony or PTP discipline it): offset 0,
//! the kernel's error bound (`host_clock`), `clock_from_host` in heartbeats.
//!
//! The estimate is published through atomics, so the switch thread reads it without a
//! lock.
//!
//! This module imports nothing of the agent: the switch thread, the launch path and the
//! registry session all read the clock, so it sits at the bottom of the module graph. The
//! probe itself is an RPC and is passed in (`registry_client::probe_clock`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

use gang_core::time::clock::{Added, ClockEstimator, Probe, ProbePacer, Probed};
use serde::Deserialize;
use tracing::{debug, info, warn};

/// The shortest probe period (after the start-up burst, and whenever the estimate moves).
pub const PERIOD: Duration = Duration::from_secs(1);
/// The longest: while the estimate stays put the period doubles up to this
/// (`clock_probe_max_ms`). Measured on a 1,024-node emulated fleet, a probe every second
/// from every agent was most of what an idle master still did (README, "Emulated fleets");
/// clocks 100 ppm apart (a poor oscillator) drift 0.8 ms in 8 s, and a clock that drifts
/// faster keeps the period shorter (`gang_core::time::clock::ProbePacer`).
pub const DEFAULT_MAX_PERIOD: Duration = Duration::from_secs(8);
pub const WINDOW: usize = 16;
/// Wake the switch thread when the offset moves by more than this (it re-arms its timer).
const KICK_THRESHOLD_NS: i64 = 100_000;

/// Where the master clock comes from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Probe the master (NTP-style, over gRPC).
    #[default]
    Probe,
    /// Trust the host clock (disciplined by chrony or PTP): offset 0.
    Host,
}

/// CLOCK_REALTIME, nanoseconds since the Unix epoch. Allocation-free (vDSO).
pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC, nanoseconds: not moved by steps of the wall clock (also the clock of
/// the state pages' `blocked_since_ns`).
pub fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(id: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The current estimate, shared lock-free with the switch thread.
#[derive(Debug)]
pub struct Clock {
    offset_ns: AtomicI64,
    error_ns: AtomicI64,
    synced: AtomicBool,
    from_host: bool,
    /// The longest probe period the master asked for at registration (ms, 0: none).
    probe_max_asked_ms: AtomicU32,
}

/// A snapshot of the estimate, for heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReport {
    pub offset_ns: i64,
    pub error_ns: i64,
    pub from_host: bool,
    /// Whether the offset comes from a probe (or the host clock is trusted); false while
    /// no probe was answered yet (offset 0, error unknown, reported as 0).
    pub synced: bool,
}

impl Clock {
    pub fn new(mode: ClockMode) -> Arc<Self> {
        let host = mode == ClockMode::Host;
        Arc::new(Clock {
            offset_ns: AtomicI64::new(0),
            error_ns: AtomicI64::new(0),
            synced: AtomicBool::new(host),
            from_host: host,
            probe_max_asked_ms: AtomicU32::new(0),
        })
    }

    /// The master asks for probes at most this far apart once the estimate is steady.
    pub fn ask_probe_max(&self, ms: u32) {
        self.probe_max_asked_ms.store(ms, Ordering::Relaxed);
    }

    /// Master minus agent clock, nanoseconds.
    pub fn offset_ns(&self) -> i64 {
        self.offset_ns.load(Ordering::Relaxed)
    }

    pub fn error_ns(&self) -> i64 {
        self.error_ns.load(Ordering::Relaxed)
    }

    /// The master clock now, as this agent estimates it.
    pub fn master_now_ns(&self) -> i64 {
        realtime_ns() + self.offset_ns()
    }

    pub fn report(&self) -> ClockReport {
        ClockReport {
            offset_ns: self.offset_ns(),
            error_ns: self.error_ns(),
            from_host: self.from_host,
            synced: self.synced.load(Ordering::Relaxed),
        }
    }

    /// Publish a new estimate; returns how far the offset moved.
    pub fn publish(&self, offset_ns: i64, error_ns: i64) -> i64 {
        let old = self.offset_ns.swap(offset_ns, Ordering::Relaxed);
        self.error_ns.store(error_ns, Ordering::Relaxed);
        self.synced.store(true, Ordering::Relaxed);
        offset_ns - old
    }
}

/// Probe the master forever (until aborted) with `probe` (one four-timestamp exchange, or
/// why it failed), publishing each new estimate to `clock` and calling `moved` when the
/// offset moved enough for the switch thread to re-arm.
pub async fn run_probes<P, F>(
    mut probe: P,
    clock: Arc<Clock>,
    max_period: Duration,
    moved: impl Fn() + Send,
) where
    P: FnMut() -> F,
    F: Future<Output = Result<Probe, String>>,
{
    let mut estimator = ClockEstimator::new(WINDOW);
    let mut answered = 0usize;
    let mut failures = 0u32;
    let mut pacer = ProbePacer::new(
        PERIOD.as_nanos() as i64,
        max_period.max(PERIOD).as_nanos() as i64,
    );
    loop {
        let mut probed = Probed::Failed;
        match probe().await {
            Ok(p) => {
                failures = 0;
                let added = estimator.add_probe(p);
                if let Added::Stepped { by_ns } = added {
                    warn!(
                        step_ms = by_ns as f64 / 1e6,
                        "clock: this host's clock and the master's disagree by {:.1} ms more than they did (a clock was stepped: settimeofday, an NTP step, a resumed VM); following the new offset and probing in a burst",
                        by_ns as f64 / 1e6
                    );
                    probed = Probed::Stepped;
                } else if estimator.contradicting() {
                    probed = Probed::Contradicted;
                }
                if added != Added::Ignored
                    && let Some(est) = estimator.estimate()
                {
                    let moved_by = clock.publish(est.offset_ns, est.error_ns);
                    if probed == Probed::Failed {
                        probed = Probed::Moved(moved_by);
                    }
                    if answered == 0 {
                        info!(
                            offset_ns = est.offset_ns,
                            error_ns = est.error_ns,
                            "clock: first probe answered, following the master clock"
                        );
                    } else {
                        debug!(
                            offset_ns = est.offset_ns,
                            error_ns = est.error_ns,
                            "clock estimate"
                        );
                    }
                    if moved_by.abs() > KICK_THRESHOLD_NS {
                        moved();
                    }
                }
                answered += 1;
            }
            Err(e) => {
                failures += 1;
                if answered == 0 && failures == 1 {
                    info!(
                        "clock: the master has not answered a probe yet ({e}); using the host clock (offset 0) until it does"
                    );
                } else if failures == 1 || failures.is_multiple_of(60) {
                    warn!(
                        failures,
                        "clock probe failed: {e}; keeping the last estimate"
                    );
                } else {
                    debug!("clock probe failed: {e}");
                }
            }
        }
        pacer.raise_max(i64::from(clock.probe_max_asked_ms.load(Ordering::Relaxed)) * 1_000_000);
        let gap = pacer.next_gap_ns(probed);
        if let Some(by_ns) = wait_or_step(Duration::from_nanos(gap as u64)).await {
            debug!(
                step_ms = by_ns as f64 / 1e6,
                "clock: this host's wall clock jumped against its monotonic clock; probing now"
            );
        }
    }
}

/// How often the wait between probes looks for a jump of this host's wall clock.
const STEP_WATCH: Duration = Duration::from_millis(250);
/// A move of (wall - monotonic) past this between two looks is a jump: slewing (NTP's
/// adjtime, at most 500 ppm) moves it by at most 0.125 ms in 250 ms.
const LOCAL_STEP_NS: i64 = 1_000_000;

/// Wait `gap`, or less if this host's wall clock jumps meanwhile (settimeofday, an NTP
/// step, a resumed VM): then the probe that confirms the step is not a long period away.
/// Returns the jump, if one cut the wait short. Steps of the master's clock are found by
/// the next probe as before.
async fn wait_or_step(gap: Duration) -> Option<i64> {
    let start = tokio::time::Instant::now();
    let mut reference = realtime_ns() - monotonic_ns();
    loop {
        let left = gap.saturating_sub(start.elapsed());
        if left.is_zero() {
            return None;
        }
        tokio::time::sleep(left.min(STEP_WATCH)).await;
        let now = realtime_ns() - monotonic_ns();
        if (now - reference).abs() > LOCAL_STEP_NS {
            return Some(now - reference);
        }
        reference = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_mode_is_synced_at_offset_zero() {
        let c = Clock::new(ClockMode::Host);
        assert_eq!(
            c.report(),
            ClockReport {
                offset_ns: 0,
                error_ns: 0,
                from_host: true,
                synced: true
            }
        );
        let p = Clock::new(ClockMode::Probe);
        assert!(!p.report().synced && !p.report().from_host);
        assert_eq!(p.publish(5_000, 200), 5_000);
        assert_eq!(p.publish(4_000, 100), -1_000);
        assert_eq!((p.offset_ns(), p.error_ns()), (4_000, 100));
        assert!(p.report().synced);
    }

    #[tokio::test(start_paused = true)]
    async fn probes_publish_the_estimate_and_wake_the_switch_thread_when_it_moves() {
        use std::sync::atomic::AtomicUsize;

        let clock = Clock::new(ClockMode::Probe);
        let kicks = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(AtomicUsize::new(0));
        // A master 5 ms ahead over an instant network; the first probe is lost.
        let probe = {
            let asked = Arc::clone(&asked);
            move || {
                let n = asked.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n == 0 {
                        return Err("unreachable".to_string());
                    }
                    let t1 = realtime_ns();
                    Ok(Probe {
                        t1,
                        t2: t1 + 5_000_000,
                        t3: t1 + 5_000_000,
                        t4: t1,
                    })
                }
            }
        };
        let task = tokio::spawn(run_probes(probe, Arc::clone(&clock), DEFAULT_MAX_PERIOD, {
            let kicks = Arc::clone(&kicks);
            move || {
                kicks.fetch_add(1, Ordering::Relaxed);
            }
        }));
        tokio::time::sleep(Duration::from_millis(70)).await;
        assert!(asked.load(Ordering::Relaxed) >= 3);
        assert_eq!(
            clock.report(),
            ClockReport {
                offset_ns: 5_000_000,
                error_ns: 0,
                from_host: false,
                synced: true
            }
        );
        // Only the move from 0 to 5 ms; the same offset again is no news.
        assert_eq!(kicks.load(Ordering::Relaxed), 1);
        task.abort();
    }

    #[test]
    fn realtime_matches_system_time() {
        let a = realtime_ns();
        let b = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        let c = realtime_ns();
        assert!(a <= b && b <= c + 1_000, "{a} {b} {c}");
    }
}
