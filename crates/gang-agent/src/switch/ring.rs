//! The switch records: a preallocated, bounded, lock-free queue from the switch thread to
//! the reporter. A full ring drops the new record and counts it; the switch thread never
//! waits and never allocates here.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use gang_proto::v1::SwitchRecord;

/// Records held before the reporter drains them: seconds of switches at a 1 ms quantum.
pub const RING_CAPACITY: usize = 4096;

/// One slot boundary on which the thread acted. Times are on the master clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub table_version: u64,
    pub slot: i64,
    pub deadline_ns: i64,
    /// Just before the first action's system call.
    pub first_ns: i64,
    /// Just after the last action's system call returned.
    pub last_ns: i64,
    pub actions: u32,
    pub clock_error_ns: i64,
}

impl From<Record> for SwitchRecord {
    fn from(r: Record) -> SwitchRecord {
        SwitchRecord {
            table_version: r.table_version,
            slot: r.slot,
            deadline_ns: r.deadline_ns,
            first_signal_ns: r.first_ns,
            last_signal_ns: r.last_ns,
            actions: r.actions,
            clock_error_ns: r.clock_error_ns,
        }
    }
}

#[derive(Debug)]
pub struct Ring {
    queue: ArrayQueue<Record>,
    dropped: AtomicU64,
}

impl Ring {
    pub fn new(capacity: usize) -> Self {
        Ring {
            queue: ArrayQueue::new(capacity.max(1)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Switch thread: add a record, or count it lost if the ring is full.
    pub fn push(&self, r: Record) {
        if self.queue.push(r).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Move every record out, oldest first; returns how many.
    pub fn drain(&self, out: &mut Vec<Record>) -> usize {
        let mut n = 0;
        while let Some(r) = self.queue.pop() {
            out.push(r);
            n += 1;
        }
        n
    }

    /// Records dropped since the last call.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(slot: i64) -> Record {
        Record {
            table_version: 1,
            slot,
            deadline_ns: slot * 10,
            first_ns: slot * 10 + 1,
            last_ns: slot * 10 + 2,
            actions: 2,
            clock_error_ns: 0,
        }
    }

    #[test]
    fn full_ring_drops_and_counts() {
        let ring = Ring::new(3);
        for s in 0..5 {
            ring.push(rec(s));
        }
        let mut out = Vec::new();
        assert_eq!(ring.drain(&mut out), 3);
        assert_eq!(
            out.iter().map(|r| r.slot).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert_eq!(ring.take_dropped(), 2);
        assert_eq!(ring.take_dropped(), 0);
        let wire = SwitchRecord::from(rec(4));
        assert_eq!(
            (wire.deadline_ns, wire.first_signal_ns, wire.last_signal_ns),
            (40, 41, 42)
        );
    }
}
