//! The state a rank keeps across a switch-out boundary: the phase of its quiesce, the
//! horizon of what must be flushed, and the context copied out in save-restore mode.
//! `quiesce.rs` moves it from phase to phase; `progress/` reads it to know what it may
//! inject.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::mailbox::Msg;
use crate::shared::{OutMsg, SendDone};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    Flushing,
    Closing,
    Quiesced,
}

pub struct Switch {
    pub phase: Phase,
    /// The boundary being quiesced for (valid outside Running).
    pub(crate) boundary: u64,
    /// The latest boundary passed; later reads of the same value are ignored.
    pub(crate) last_passed: u64,
    pub(crate) started: Instant,
    pub(crate) flush_done: Option<Instant>,
    pub(crate) flush_ns: u64,
    /// Per destination: messages posted before the quiesce began.
    pub(crate) horizon: Vec<u64>,
    pub saved: Option<SavedContext>,
    /// A resume in progress: when it began and for which boundary.
    pub(crate) restoring: Option<Instant>,
}

impl Switch {
    pub fn new(size: usize) -> Switch {
        Switch {
            phase: Phase::Running,
            boundary: 0,
            last_passed: 0,
            started: Instant::now(),
            flush_done: None,
            flush_ns: 0,
            horizon: vec![0; size],
            saved: None,
            restoring: None,
        }
    }

    /// Highest per-destination sequence number that may be injected now.
    pub fn inject_limit(&self, dest: usize) -> u64 {
        match self.phase {
            Phase::Running => u64::MAX,
            Phase::Flushing => self.horizon[dest],
            Phase::Closing | Phase::Quiesced => 0,
        }
    }
}

/// The network context copied out of the transport: every queued send (in
/// order, per destination) and every received message not yet matched, in one
/// contiguous buffer. Send completions cannot be serialized and ride beside it.
pub struct SavedContext {
    bytes: Vec<u8>,
    sends: usize,
    done: Vec<Option<Arc<SendDone>>>,
}

fn put(buf: &mut Vec<u8>, a: u64, tag: i32, seq: u64, data: &[u8]) {
    buf.extend_from_slice(&a.to_le_bytes());
    buf.extend_from_slice(&tag.to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&(data.len() as u64).to_le_bytes());
    buf.extend_from_slice(data);
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn u64(&mut self) -> u64 {
        let (h, t) = self.0.split_at(8);
        self.0 = t;
        u64::from_le_bytes(h.try_into().unwrap())
    }
    fn i32(&mut self) -> i32 {
        let (h, t) = self.0.split_at(4);
        self.0 = t;
        i32::from_le_bytes(h.try_into().unwrap())
    }
    fn record(&mut self) -> (u64, i32, u64, Vec<u8>) {
        let a = self.u64();
        let tag = self.i32();
        let seq = self.u64();
        let len = self.u64() as usize;
        let (d, t) = self.0.split_at(len);
        self.0 = t;
        (a, tag, seq, d.to_vec())
    }
}

impl SavedContext {
    pub(crate) fn save(
        pending: &mut [VecDeque<OutMsg>],
        unexpected: &mut VecDeque<Msg>,
    ) -> SavedContext {
        let total: usize = pending
            .iter()
            .flatten()
            .map(|m| m.data.len() + 28)
            .sum::<usize>()
            + unexpected.iter().map(|m| m.data.len() + 28).sum::<usize>();
        let mut bytes = Vec::with_capacity(total);
        let mut done = Vec::new();
        let mut sends = 0;
        for (d, q) in pending.iter_mut().enumerate() {
            for m in q.drain(..) {
                put(&mut bytes, d as u64, m.tag, m.seq, &m.data);
                done.push(m.done);
                sends += 1;
            }
        }
        for m in unexpected.drain(..) {
            put(&mut bytes, m.src as u64, m.tag, 0, &m.data);
        }
        SavedContext { bytes, sends, done }
    }

    /// Per-destination sends (to go before anything queued since) and the
    /// received messages, in their original order.
    pub(crate) fn restore(self, size: usize) -> (Vec<VecDeque<OutMsg>>, Vec<Msg>) {
        let mut cur = Cursor(&self.bytes);
        let mut sends: Vec<VecDeque<OutMsg>> = (0..size).map(|_| VecDeque::new()).collect();
        for done in self.done.into_iter().take(self.sends) {
            let (d, tag, seq, data) = cur.record();
            sends[d as usize].push_back(OutMsg {
                tag,
                data,
                seq,
                done,
            });
        }
        let mut msgs = Vec::new();
        while !cur.0.is_empty() {
            let (src, tag, _, data) = cur.record();
            msgs.push(Msg {
                src: src as usize,
                tag,
                data,
            });
        }
        (sends, msgs)
    }
}
