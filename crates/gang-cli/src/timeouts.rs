//! How long `prun` and `gangctl` wait for the master: to connect, and for the answer to
//! each request (`--timeout`, `GANG_TIMEOUT`; 10 s unless set, 0 for no limit).
//!
//! A master that accepts connections and never answers (hung, stopped, or not a master
//! at all) must not hang a user's command. Streams are not cut off: only their opening is
//! timed, so `prun`'s relay of a week-long job or `gangctl attach` follow as long as the
//! job runs. Process-wide, as a client talks to one master: the flag is read once in
//! `main`, and every connection and every error made later sees it without a parameter
//! threaded through each call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The default: long enough for a loaded master committing to a slow disk, short enough
/// that a user waiting at a prompt is told.
pub const DEFAULT: Duration = Duration::from_secs(10);

static LIMIT_MS: AtomicU64 = AtomicU64::new(DEFAULT.as_millis() as u64);
static MASTER: Mutex<String> = Mutex::new(String::new());

/// Set the limit; zero: wait forever.
pub fn set_limit(limit: Duration) {
    LIMIT_MS.store(limit.as_millis() as u64, Ordering::Relaxed);
}

/// The limit in force, `None` when there is none.
pub fn limit() -> Option<Duration> {
    match LIMIT_MS.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Remember the address dialed, so that a timed-out call can say whose answer is missing.
pub fn note_master(addr: &str) {
    if let Ok(mut m) = MASTER.lock() {
        addr.clone_into(&mut m);
    }
}

/// The address last dialed ("the master" before any).
pub fn master() -> String {
    match MASTER.lock() {
        Ok(m) if !m.is_empty() => m.clone(),
        _ => "the master".into(),
    }
}

/// `10s`, `1m30s`, `250ms`: as the limit was given.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match (s / 60, s % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

/// Whether a status is tonic's own timeout (the request timeout of the channel), not an
/// answer of the master's: tonic reports it as `CANCELLED: Timeout expired`.
pub fn is_timeout(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Cancelled && s.message() == "Timeout expired"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_as_given() {
        assert_eq!(show(Duration::from_secs(10)), "10s");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
        assert_eq!(show(Duration::from_secs(120)), "2m");
        assert_eq!(show(Duration::from_millis(250)), "250ms");
    }
}
