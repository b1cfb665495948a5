//! `clock = "host"`: the host clock is trusted, so its error bound is what the kernel's
//! clock discipline says (chrony, ntpd and ptp4l/phc2sys keep the kernel's NTP state:
//! `maxerror`, and `STA_UNSYNC` when nothing disciplines the clock). That bound is
//! published as the clock's error, so heartbeats and switch reports carry a true figure
//! instead of 0; no probe of the master is needed for it.
//!
//! A clock the kernel calls unsynchronised keeps error 0 (on one host the master's clock
//! is the same clock: exact), and the agent says once that across hosts it is unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::{info, warn};

use super::clock::Clock;

/// How often the kernel's bound is read again: it grows by the tolerance (500 ppm) between
/// the discipline's updates, so a minute-old bound is still a fair upper estimate.
pub const PERIOD: Duration = Duration::from_secs(16);
/// Larger than this the kernel reports as "unknown" (its cap, NTP_PHASE_LIMIT-like 16 s).
const UNKNOWN_US: i64 = 16_000_000;

/// The kernel's view of the host clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSync {
    /// A discipline (chrony, PTP) keeps the clock: `STA_UNSYNC` is clear.
    pub synced: bool,
    /// The kernel's maximum error, nanoseconds.
    pub max_error_ns: i64,
}

/// Read (never set) the kernel's NTP state.
pub fn kernel_sync() -> std::io::Result<HostSync> {
    // SAFETY: an all-zero timex is valid; modes 0 asks nothing to change, so no privilege
    // is needed and the kernel only fills the struct.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    if unsafe { libc::ntp_adjtime(&mut t) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(from_timex(t.status, t.maxerror as i64))
}

fn from_timex(status: i32, max_error_us: i64) -> HostSync {
    HostSync {
        synced: status & libc::STA_UNSYNC == 0 && max_error_us < UNKNOWN_US,
        max_error_ns: max_error_us.clamp(0, UNKNOWN_US) * 1_000,
    }
}

/// The error bound to publish: the kernel's when it is synchronised, else 0.
pub fn bound_ns(s: HostSync) -> i64 {
    if s.synced { s.max_error_ns } else { 0 }
}

/// Publish the kernel's bound every [`PERIOD`] (until aborted).
pub async fn run_host_bound(clock: Arc<Clock>) {
    // Emulated fleets run thousands of nodes in one process: say it once per process.
    static SAID: AtomicBool = AtomicBool::new(false);
    loop {
        match kernel_sync() {
            Ok(s) => {
                clock.publish(0, bound_ns(s));
                if !SAID.swap(true, Ordering::Relaxed) {
                    if s.synced {
                        info!(
                            max_error_us = s.max_error_ns / 1000,
                            "clock = host: the kernel's clock discipline bounds its error"
                        );
                    } else {
                        warn!(
                            "clock = host, but the kernel says the host clock is not synchronised (no chrony or PTP discipline): exact against a master on this host, unknown across hosts (use clock = probe there)"
                        );
                    }
                }
            }
            Err(e) => {
                if !SAID.swap(true, Ordering::Relaxed) {
                    warn!("clock = host: cannot read the kernel's clock state: {e}");
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disciplined_clock_reports_the_kernels_bound() {
        let s = from_timex(0, 1_250);
        assert_eq!(
            s,
            HostSync {
                synced: true,
                max_error_ns: 1_250_000
            }
        );
        assert_eq!(bound_ns(s), 1_250_000);
    }

    #[test]
    fn an_undisciplined_clock_reports_no_bound() {
        let s = from_timex(libc::STA_UNSYNC, 16_000_000);
        assert!(!s.synced);
        assert_eq!(bound_ns(s), 0);
        // The kernel's cap means unknown, whatever the status says.
        assert!(!from_timex(0, 16_000_000).synced);
    }

    #[test]
    fn the_kernel_answers_a_read() {
        let s = kernel_sync().expect("ntp_adjtime(modes 0) needs no privilege");
        assert!(s.max_error_ns >= 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_is_published_to_the_clock() {
        let clock = Clock::new(super::super::clock::ClockMode::Host);
        let expect = bound_ns(kernel_sync().unwrap());
        let task = tokio::spawn(run_host_bound(Arc::clone(&clock)));
        tokio::task::yield_now().await;
        assert_eq!((clock.offset_ns(), clock.error_ns()), (0, expect));
        assert!(clock.report().from_host);
        task.abort();
    }
}
