//! The outbox: everything the agent owes the master (rank output, exit reports), in one
//! ordered queue drained by a single sender (`registry_client::run_uplink`).
//!
//! One queue gives the ordering invariant for free: a rank's supervisor queues its exit only
//! after both of its pipes are drained, so every chunk of its output is ahead of the exit
//! and reaches the master first. Output is batched (a batch goes out at 64 KiB or when its
//! oldest chunk is 20 ms old, whichever comes first, or at once when an exit waits behind
//! it). While the master is unreachable output piles up; each rank may hold at most
//! `RANK_CAP` bytes here, beyond which its oldest chunks are dropped (with a warning).
//! Exit reports are never dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gang_proto::v1::{Output, OutputBatch, RankExit, Stream};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::warn;

use crate::ranks::RankKey;

pub const BATCH_BYTES: usize = 64 * 1024;
pub const BATCH_DELAY: Duration = Duration::from_millis(20);
pub const RANK_CAP: usize = 8 * 1024 * 1024;
/// At most one "dropping output" warning per rank this often.
const DROP_WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Item {
    Output {
        key: RankKey,
        stream: Stream,
        offset: u64,
        data: Vec<u8>,
        at: Instant,
    },
    Exit(RankExit),
}

/// What the sender should deliver next.
#[derive(Debug)]
pub enum Outgoing {
    /// One batch per job, in queue order.
    Output(Vec<OutputBatch>),
    Exit(RankExit),
}

#[derive(Debug, Default)]
struct RankBytes {
    queued: usize,
    dropped: u64,
    warned_at: Option<Instant>,
    /// The exit is queued: no more output will come; the entry can go once drained.
    ended: bool,
    /// Bytes produced so far per stream (indexed by `Stream as usize`): the offset of the
    /// next chunk, so the master can drop bytes a retried push repeats.
    produced: [u64; 3],
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Item>,
    /// Output bytes in `queue`.
    output_bytes: usize,
    /// Exit reports in `queue`.
    exits: usize,
    per_rank: HashMap<RankKey, RankBytes>,
    /// Items handed to the sender and not yet marked `done`.
    in_flight: usize,
}

#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// Wakes the sender: something was queued.
    queued: Notify,
    /// Wakes shutdown: the outbox may have become idle.
    idle: Notify,
    cap: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::with_cap(RANK_CAP)
    }
}

impl Outbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// An outbox holding at most `cap` bytes of any one rank's output.
    pub fn with_cap(cap: usize) -> Self {
        Outbox {
            state: Mutex::default(),
            queued: Notify::new(),
            idle: Notify::new(),
            cap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push_output(&self, key: RankKey, stream: Stream, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let mut st = self.lock();
        let len = data.len();
        let (offset, queued) = {
            let r = st.per_rank.entry(key).or_default();
            let offset = r.produced[stream as usize];
            r.produced[stream as usize] += len as u64;
            r.queued += len;
            (offset, r.queued)
        };
        st.queue.push_back(Item::Output {
            key,
            stream,
            offset,
            data,
            at: Instant::now(),
        });
        st.output_bytes += len;
        if queued > self.cap {
            st.drop_oldest(key, self.cap);
        }
        drop(st);
        self.queued.notify_one();
    }

    pub fn push_exit(&self, exit: RankExit) {
        let key = RankKey {
            job_id: exit.job_id,
            rank: exit.rank,
        };
        let mut st = self.lock();
        if let Some(r) = st.per_rank.get_mut(&key) {
            if r.dropped > 0 {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    dropped_bytes = r.dropped,
                    "rank exited; some of its output was dropped while the master was unreachable"
                );
            }
            r.ended = true;
            if r.queued == 0 {
                st.per_rank.remove(&key);
            }
        }
        st.queue.push_back(Item::Exit(exit));
        st.exits += 1;
        drop(st);
        self.queued.notify_one();
    }

    /// The next thing to deliver, once it is due. Call `done` after delivering it.
    /// Only one task may call this (the uplink).
    pub async fn next(&self) -> Outgoing {
        loop {
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            let due = {
                let mut st = self.lock();
                match st.queue.front() {
                    None => None,
                    Some(Item::Exit(_)) => {
                        let Some(Item::Exit(exit)) = st.queue.pop_front() else {
                            unreachable!("front was an exit");
                        };
                        st.exits -= 1;
                        st.in_flight += 1;
                        return Outgoing::Exit(exit);
                    }
                    Some(Item::Output { at, .. }) => {
                        let due = *at + BATCH_DELAY;
                        // An exit waiting behind the output: its rank is finished, so there
                        // is nothing to wait for.
                        if st.output_bytes >= BATCH_BYTES || st.exits > 0 || Instant::now() >= due {
                            st.in_flight += 1;
                            return Outgoing::Output(st.take_batches());
                        }
                        Some(due)
                    }
                }
            };
            match due {
                None => queued.await,
                Some(due) => {
                    tokio::select! {
                        () = &mut queued => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
            }
        }
    }

    /// The sender finished with what `next` returned (delivered, or given up for good).
    pub fn done(&self) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        let idle = st.is_idle();
        drop(st);
        if idle {
            self.idle.notify_waiters();
        }
    }

    /// Nothing queued and nothing being delivered.
    pub fn is_idle(&self) -> bool {
        self.lock().is_idle()
    }

    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.is_idle() {
                return;
            }
            idle.await;
        }
    }

    /// Bytes of output queued for a rank (for tests and diagnostics).
    pub fn queued_bytes(&self, key: RankKey) -> usize {
        self.lock().per_rank.get(&key).map_or(0, |r| r.queued)
    }
}

impl State {
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight == 0
    }

    /// Drop the rank's oldest queued chunks until it is within `cap`.
    fn drop_oldest(&mut self, key: RankKey, cap: usize) {
        let mut dropped = 0usize;
        while self.per_rank.get(&key).is_some_and(|r| r.queued > cap) {
            let Some(i) = self
                .queue
                .iter()
                .position(|item| matches!(item, Item::Output { key: k, .. } if *k == key))
            else {
                break;
            };
            if let Some(Item::Output { data, .. }) = self.queue.remove(i) {
                dropped += data.len();
                self.output_bytes -= data.len();
                if let Some(r) = self.per_rank.get_mut(&key) {
                    r.queued -= data.len();
                }
            }
        }
        let Some(r) = self.per_rank.get_mut(&key) else {
            return;
        };
        r.dropped += dropped as u64;
        let now = Instant::now();
        if r.warned_at
            .is_none_or(|t| now.duration_since(t) >= DROP_WARN_EVERY)
        {
            r.warned_at = Some(now);
            warn!(
                job_id = key.job_id,
                rank = key.rank,
                dropped_bytes = r.dropped,
                cap_bytes = cap,
                "output not delivered to the master (unreachable?): dropping the oldest"
            );
        }
    }

    /// Take up to about `BATCH_BYTES` of output from the front of the queue (stopping at
    /// an exit), grouped into one batch per job. Adjacent chunks of the same rank and
    /// stream are merged; order within each stream is kept.
    fn take_batches(&mut self) -> Vec<OutputBatch> {
        let mut batches: Vec<OutputBatch> = Vec::new();
        let mut taken = 0usize;
        while taken < BATCH_BYTES && matches!(self.queue.front(), Some(Item::Output { .. })) {
            let Some(Item::Output {
                key,
                stream,
                offset,
                data,
                ..
            }) = self.queue.pop_front()
            else {
                unreachable!("front was output");
            };
            taken += data.len();
            self.output_bytes -= data.len();
            if let Some(r) = self.per_rank.get_mut(&key) {
                r.queued -= data.len();
                if r.queued == 0 && r.ended {
                    self.per_rank.remove(&key);
                }
            }
            let batch = match batches.iter_mut().position(|b| b.job_id == key.job_id) {
                Some(i) => &mut batches[i],
                None => {
                    batches.push(OutputBatch {
                        job_id: key.job_id,
                        chunks: Vec::new(),
                    });
                    batches.last_mut().expect("just pushed")
                }
            };
            match batch.chunks.last_mut() {
                // Only contiguous bytes merge: a gap (oldest output dropped) keeps its offset.
                Some(last)
                    if last.rank == key.rank
                        && last.stream == stream as i32
                        && last.offset.map(|o| o + last.data.len() as u64) == Some(offset) =>
                {
                    last.data.extend_from_slice(&data);
                }
                _ => batch.chunks.push(Output {
                    rank: key.rank,
                    stream: stream as i32,
                    data,
                    offset: Some(offset),
                }),
            }
        }
        batches
    }
}

/// Copy one of a rank's pipes into the outbox until EOF.
pub async fn pump(mut pipe: impl AsyncRead + Unpin, key: RankKey, stream: Stream, outbox: &Outbox) {
    let mut buf = vec![0u8; BATCH_BYTES];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => outbox.push_output(key, stream, buf[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    ?stream,
                    "reading rank output: {e}"
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::rank_exit::How;

    fn key(job_id: u64, rank: u32) -> RankKey {
        RankKey { job_id, rank }
    }

    fn exit(job_id: u64, rank: u32) -> RankExit {
        RankExit {
            job_id,
            rank,
            x: 0,
            y: 0,
            how: Some(How::Code(0)),
            abort: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn small_output_waits_for_the_batch_delay() {
        let outbox = Outbox::new();
        let t0 = Instant::now();
        outbox.push_output(key(1, 0), Stream::Stdout, b"a".to_vec());
        outbox.push_output(key(1, 0), Stream::Stdout, b"b".to_vec());
        outbox.push_output(key(1, 0), Stream::Stderr, b"c".to_vec());
        let Outgoing::Output(batches) = outbox.next().await else {
            panic!("expected output");
        };
        assert!(t0.elapsed() >= BATCH_DELAY);
        assert_eq!(batches.len(), 1);
        let chunks = &batches[0].chunks;
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].data, b"ab");
        assert_eq!(chunks[1].data, b"c");
        assert!(!outbox.is_idle());
        outbox.done();
        assert!(outbox.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn full_batch_goes_at_once_and_exit_comes_after_output() {
        let outbox = Outbox::new();
        let t0 = Instant::now();
        outbox.push_output(key(1, 0), Stream::Stdout, vec![b'x'; BATCH_BYTES]);
        outbox.push_output(key(2, 0), Stream::Stdout, b"y".to_vec());
        outbox.push_exit(exit(2, 0));
        let Outgoing::Output(first) = outbox.next().await else {
            panic!("expected output");
        };
        assert_eq!(t0.elapsed(), Duration::ZERO);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].job_id, 1);
        outbox.done();
        // The exit behind it makes the rest due at once.
        let Outgoing::Output(second) = outbox.next().await else {
            panic!("expected output");
        };
        assert_eq!(second[0].job_id, 2);
        assert_eq!(t0.elapsed(), Duration::ZERO);
        outbox.done();
        assert!(matches!(outbox.next().await, Outgoing::Exit(e) if e.job_id == 2));
        outbox.done();
        assert!(outbox.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn cap_drops_the_oldest_output_of_that_rank_only() {
        let outbox = Outbox::with_cap(10);
        outbox.push_output(key(1, 1), Stream::Stdout, b"keep".to_vec());
        for chunk in [b"0123", b"4567", b"89ab", b"cdef"] {
            outbox.push_output(key(1, 0), Stream::Stdout, chunk.to_vec());
        }
        assert_eq!(outbox.queued_bytes(key(1, 0)), 8);
        outbox.push_exit(exit(1, 0));
        let Outgoing::Output(batches) = outbox.next().await else {
            panic!("expected output");
        };
        let chunks = &batches[0].chunks;
        assert_eq!(chunks[0].rank, 1);
        assert_eq!(chunks[0].data, b"keep");
        assert_eq!(chunks[1].data, b"89abcdef");
        outbox.done();
        assert!(matches!(outbox.next().await, Outgoing::Exit(_)));
    }
}
