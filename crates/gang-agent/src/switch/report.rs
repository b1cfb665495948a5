//! Sending the switch records to the master: every `PERIOD` the ring is drained into a
//! bounded buffer and sent as one `ReportSwitches` message with the count of records lost.
//! While the master is unreachable the buffer keeps the newest `BUFFER_CAP` records and
//! counts the rest as dropped. The switch thread is never waited on. Sending is the
//! caller's (`registry_client::report_switches`), so the switch path depends on no RPC
//! client.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gang_proto::v1::{SwitchRecord, SwitchReport};
use tonic::{Code, Status};
use tracing::{debug, warn};

use crate::switch::Switcher;
use crate::switch::ring::Record;

pub const PERIOD: Duration = Duration::from_millis(250);
/// Records kept while the master cannot be reached.
pub const BUFFER_CAP: usize = 4096;
/// Records per message.
pub const PER_REPORT: usize = 1024;
/// At most one warning about failing actions this often.
const ERROR_WARN_EVERY: Duration = Duration::from_secs(10);

/// The bounded buffer between the ring and the master.
#[derive(Debug, Default)]
pub struct Pending {
    records: VecDeque<SwitchRecord>,
    /// Lost since the last report the master accepted.
    pub dropped: u64,
    /// Messaging-library switch-outs, quiesced and not, not yet reported.
    pub msg_flushed: u64,
    pub msg_unflushed: u64,
}

impl Pending {
    /// Add drained records (and the ring's drop count), keeping the newest `cap`.
    pub fn add(
        &mut self,
        records: impl IntoIterator<Item = Record>,
        ring_dropped: u64,
        cap: usize,
    ) {
        self.dropped += ring_dropped;
        for r in records {
            if self.records.len() >= cap {
                self.records.pop_front();
                self.dropped += 1;
            }
            self.records.push_back(r.into());
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.dropped == 0
            && self.msg_flushed == 0
            && self.msg_unflushed == 0
    }

    /// The next message: up to `PER_REPORT` records and the drop count.
    pub fn next_report(&self, x: u32, y: u32) -> SwitchReport {
        SwitchReport {
            x,
            y,
            records: self.records.iter().take(PER_REPORT).cloned().collect(),
            dropped: self.dropped,
            msg_flushed: self.msg_flushed,
            msg_unflushed: self.msg_unflushed,
        }
    }

    /// The master took `report` (the last one `report` returned; nothing was added since).
    pub fn sent(&mut self, report: &SwitchReport) {
        let n = report.records.len().min(self.records.len());
        self.records.drain(..n);
        self.dropped -= report.dropped.min(self.dropped);
        self.msg_flushed -= report.msg_flushed.min(self.msg_flushed);
        self.msg_unflushed -= report.msg_unflushed.min(self.msg_unflushed);
    }
}

/// Drain and report through `send` until aborted.
pub async fn run_reports<S, F>(mut send: S, switcher: Arc<Switcher>)
where
    S: FnMut(SwitchReport) -> F,
    F: Future<Output = Result<(), Status>>,
{
    let node = switcher.node();
    let mut pending = Pending::default();
    let mut drained = Vec::new();
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut errors_seen = 0u64;
    let mut warned_at: Option<tokio::time::Instant> = None;
    let mut refused = false;
    let mut msg_seen = (0u64, 0u64);
    loop {
        ticks.tick().await;
        let msg = switcher.msg_switch_outs();
        pending.msg_flushed += msg.0 - msg_seen.0;
        pending.msg_unflushed += msg.1 - msg_seen.1;
        msg_seen = msg;
        let (errors, errno) = switcher.errors();
        if errors > errors_seen && warned_at.is_none_or(|t| t.elapsed() >= ERROR_WARN_EVERY) {
            warn!(
                failed = errors - errors_seen,
                "switch actions failed: {}",
                std::io::Error::from_raw_os_error(errno)
            );
            errors_seen = errors;
            warned_at = Some(tokio::time::Instant::now());
        }
        drained.clear();
        let ring_dropped = switcher.drain_records(&mut drained);
        pending.add(drained.drain(..), ring_dropped, BUFFER_CAP);
        if pending.is_empty() {
            continue;
        }
        let report = pending.next_report(node.x, node.y);
        match send(report.clone()).await {
            Ok(_) => {
                pending.sent(&report);
                refused = false;
            }
            Err(s) if matches!(s.code(), Code::Unimplemented | Code::InvalidArgument) => {
                // This master does not take them: nothing to retry.
                if !refused {
                    warn!(
                        "the master refuses switch reports: {}; dropping them",
                        s.message()
                    );
                    refused = true;
                }
                pending.dropped += report.records.len() as u64;
                pending.sent(&SwitchReport {
                    dropped: 0,
                    ..report
                });
            }
            Err(s) => debug!(
                buffered = pending.len(),
                dropped = pending.dropped,
                "switch report not delivered: {}",
                s.message()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(slot: i64) -> Record {
        Record {
            table_version: 1,
            slot,
            deadline_ns: 0,
            first_ns: 0,
            last_ns: 0,
            actions: 1,
            clock_error_ns: 0,
        }
    }

    #[test]
    fn keeps_the_newest_and_counts_the_rest() {
        let mut p = Pending::default();
        p.add((0..10).map(rec), 3, 4);
        assert_eq!(p.len(), 4);
        assert_eq!(p.dropped, 3 + 6);
        let b = p.next_report(1, 2);
        assert_eq!(
            b.records.iter().map(|r| r.slot).collect::<Vec<_>>(),
            vec![6, 7, 8, 9]
        );
        assert_eq!((b.x, b.y, b.dropped), (1, 2, 9));
        p.sent(&b);
        assert!(p.is_empty());
        p.add([rec(10)], 1, 4);
        assert_eq!((p.len(), p.dropped), (1, 1));
    }

    #[test]
    fn reports_are_bounded() {
        let mut p = Pending::default();
        p.add((0..(PER_REPORT as i64 + 5)).map(rec), 0, BUFFER_CAP);
        let b = p.next_report(0, 0);
        assert_eq!(b.records.len(), PER_REPORT);
        p.sent(&b);
        assert_eq!(p.len(), 5);
    }
}
