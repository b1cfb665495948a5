//! The outbox: everything the agent owes the master (rank output, exit reports), in one
//! ordered queue drained by a single sender (`registry_client::run_uplink`).
//!
//! One queue gives the ordering invariant for free: a rank's supervisor queues its exit only
//! after both of its pipes are drained, so every chunk of its output is ahead of the exit
//! and reaches the master first. Output is gathered into pushes (a push carries at most `PUSH_BYTES`;
//! it goes when that much waits, when its oldest chunk is 20 ms old, or at once when an
//! exit waits behind it).
//!
//! Nothing is dropped while the master takes output. Each rank may have `window` bytes
//! here; past that its pumps stop reading its pipes until the sender has taken some, so
//! the pipes fill and the rank's writes block, as on a terminal or under srun: a fast
//! writer runs at the speed of the path to the master. Only when the sender is stalled
//! (a push unanswered for `stall_after`: the master is down, stopped or cut off) does
//! output go past the window, into the job's spool on the node's disk (`spool.rs`), to be
//! delivered in order once the master is back. Past the spool's bound for the job,
//! output is discarded and counted: the exit report says how much each stream produced,
//! and the master, comparing with what it logged, tells the user what was lost. Exit
//! reports are never dropped.

mod spool;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gang_proto::v1::{Output, OutputBatch, RankExit, Stream};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{info, warn};

use spool::SpoolRefused;
pub use spool::Spools;

use crate::ranks::RankKey;

/// The most one push carries.
pub const PUSH_BYTES: usize = 1024 * 1024;
/// How much a pump reads from a pipe at once.
pub const READ_BYTES: usize = 64 * 1024;
pub const PUSH_DELAY: Duration = Duration::from_millis(20);
/// Output bytes of one rank held in memory before its pipes are left unread.
pub const RANK_WINDOW: usize = 4 * 1024 * 1024;
/// A push unanswered this long means the master is not taking output: spool instead of
/// holding the ranks up.
pub const STALL_AFTER: Duration = Duration::from_secs(2);
/// The default bound on a job's spooled output on one node.
pub const SPOOL_CAP: u64 = 256 * 1024 * 1024;
/// How often a pump held up by the window looks again whether the sender stalled.
const STALL_POLL: Duration = Duration::from_millis(100);
/// At most one "discarding output" warning per rank this often.
const DROP_WARN_EVERY: Duration = Duration::from_secs(10);

/// How the outbox holds output.
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// Bytes of one rank in memory before its pumps wait (`RANK_WINDOW`).
    pub window: usize,
    /// How long a push may go unanswered before output is spooled (`STALL_AFTER`).
    pub stall_after: Duration,
    /// Where jobs' spools go (the node's own directory); `None`: no spool, output past the
    /// window is discarded (and counted) while the sender is stalled.
    pub spool_dir: Option<PathBuf>,
    /// The most a job may have spooled on this node (`SPOOL_CAP`).
    pub spool_cap: u64,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            window: RANK_WINDOW,
            stall_after: STALL_AFTER,
            spool_dir: None,
            spool_cap: SPOOL_CAP,
        }
    }
}

/// A chunk's bytes: in memory, or in the job's spool.
#[derive(Debug)]
enum Chunk {
    Mem(Vec<u8>),
    Spooled { at: u64, len: usize },
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Mem(v) => v.len(),
            Chunk::Spooled { len, .. } => *len,
        }
    }
}

#[derive(Debug)]
enum Item {
    Output {
        key: RankKey,
        stream: Stream,
        offset: u64,
        chunk: Chunk,
        at: Instant,
    },
    Exit(RankExit),
}

/// What the sender should deliver next.
#[derive(Debug)]
pub enum Outgoing {
    /// One push per job, in queue order.
    Output(Vec<OutputBatch>),
    Exit(RankExit),
}

#[derive(Debug, Default)]
struct RankBytes {
    /// Bytes of its output in memory in the queue.
    queued: usize,
    /// Bytes of its output in the queue that are in the spool.
    spooled: usize,
    /// Bytes discarded per stream (indexed by `Stream as usize`).
    lost: [u64; 3],
    warned_at: Option<Instant>,
    /// The exit is queued: no more output will come; the entry can go once drained.
    ended: bool,
    /// Bytes produced so far per stream: the offset of the next chunk, so the master can
    /// drop bytes a retried push repeats, and what the exit report tells it.
    produced: [u64; 3],
}

#[derive(Debug)]
struct State {
    queue: VecDeque<Item>,
    /// Output bytes in `queue`.
    output_bytes: usize,
    /// Exit reports in `queue`.
    exits: usize,
    per_rank: HashMap<RankKey, RankBytes>,
    /// Items handed to the sender and not yet marked `done`, and since when the oldest was.
    in_flight: usize,
    in_flight_since: Option<Instant>,
    spools: Option<Spools>,
}

#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// Wakes the sender: something was queued.
    queued: Notify,
    /// Wakes pumps waiting for room: the sender took output.
    room: Notify,
    /// Wakes shutdown: the outbox may have become idle.
    idle: Notify,
    cfg: OutboxConfig,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::with_config(OutboxConfig::default())
    }
}

impl Outbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// An outbox with `cfg`; its spool directory (if any) must exist (`Spools::prepare`).
    pub fn with_config(cfg: OutboxConfig) -> Self {
        let spools = cfg
            .spool_dir
            .clone()
            .map(|dir| Spools::new(dir, cfg.spool_cap));
        Outbox {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                output_bytes: 0,
                exits: 0,
                per_rank: HashMap::new(),
                in_flight: 0,
                in_flight_since: None,
                spools,
            }),
            queued: Notify::new(),
            room: Notify::new(),
            idle: Notify::new(),
            cfg,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a chunk a rank wrote: in memory, or (the sender stalled and the rank past its
    /// window) in its job's spool, or, with the spool full, counted as lost.
    pub fn push_output(&self, key: RankKey, stream: Stream, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut st = self.lock();
        let stalled = st.stalled(now, self.cfg.stall_after);
        let len = data.len();
        let (offset, over) = {
            let r = st.per_rank.entry(key).or_default();
            let offset = r.produced[stream as usize];
            r.produced[stream as usize] += len as u64;
            (offset, r.queued >= self.cfg.window)
        };
        let chunk = if stalled && over {
            match st.spool(key, &data) {
                Ok(at) => Chunk::Spooled { at, len },
                Err(why) => {
                    st.discard(key, stream, len as u64, &why, now);
                    return;
                }
            }
        } else {
            Chunk::Mem(data)
        };
        if let Some(r) = st.per_rank.get_mut(&key) {
            match chunk {
                Chunk::Mem(_) => r.queued += len,
                Chunk::Spooled { .. } => r.spooled += len,
            }
        }
        st.queue.push_back(Item::Output {
            key,
            stream,
            offset,
            chunk,
            at: now,
        });
        st.output_bytes += len;
        drop(st);
        self.queued.notify_one();
    }

    /// Wait until the rank may queue more output: its bytes in memory are under the
    /// window, or the sender is stalled (then more goes to the spool). The pumps call it
    /// before each read, so a rank the master cannot keep up with blocks in `write`.
    pub async fn wait_room(&self, key: RankKey) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let st = self.lock();
                let under = st
                    .per_rank
                    .get(&key)
                    .is_none_or(|r| r.queued < self.cfg.window);
                if under || st.stalled(Instant::now(), self.cfg.stall_after) {
                    return;
                }
            }
            tokio::select! {
                () = &mut room => {}
                () = tokio::time::sleep(STALL_POLL) => {}
            }
        }
    }

    pub fn push_exit(&self, mut exit: RankExit) {
        let key = RankKey {
            job_id: exit.job_id,
            rank: exit.rank,
        };
        let mut st = self.lock();
        if let Some(r) = st.per_rank.get_mut(&key) {
            exit.stdout_bytes = r.produced[Stream::Stdout as usize];
            exit.stderr_bytes = r.produced[Stream::Stderr as usize];
            let lost: u64 = r.lost.iter().sum();
            if lost > 0 {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    lost_bytes = lost,
                    "rank exited; some of its output was discarded while the master was unreachable (the job's spool was full)"
                );
            }
            r.ended = true;
            if r.queued == 0 && r.spooled == 0 {
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
                        st.hand_out();
                        return Outgoing::Exit(exit);
                    }
                    Some(Item::Output { at, .. }) => {
                        let due = *at + PUSH_DELAY;
                        // An exit waiting behind the output: its rank is finished, so there
                        // is nothing to wait for.
                        if st.output_bytes >= PUSH_BYTES || st.exits > 0 || Instant::now() >= due {
                            st.hand_out();
                            let pushes = st.take_pushes();
                            drop(st);
                            self.room.notify_waiters();
                            return Outgoing::Output(pushes);
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
        if st.in_flight == 0 {
            st.in_flight_since = None;
        }
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

    /// Bytes of output queued in memory for a rank (for tests and diagnostics).
    pub fn queued_bytes(&self, key: RankKey) -> usize {
        self.lock().per_rank.get(&key).map_or(0, |r| r.queued)
    }

    /// Bytes of a rank's output discarded so far, per stream (stdout, stderr).
    pub fn lost_bytes(&self, key: RankKey) -> (u64, u64) {
        self.lock().per_rank.get(&key).map_or((0, 0), |r| {
            (
                r.lost[Stream::Stdout as usize],
                r.lost[Stream::Stderr as usize],
            )
        })
    }
}

impl State {
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight == 0
    }

    fn hand_out(&mut self) {
        self.in_flight += 1;
        self.in_flight_since.get_or_insert_with(Instant::now);
    }

    /// The sender has been on one delivery for `after` or longer: the master is not
    /// taking output now.
    fn stalled(&self, now: Instant, after: Duration) -> bool {
        self.in_flight_since
            .is_some_and(|t| now.saturating_duration_since(t) >= after)
    }

    fn spool(&mut self, key: RankKey, data: &[u8]) -> Result<u64, String> {
        let Some(spools) = self.spools.as_mut() else {
            return Err("no spool directory".into());
        };
        let cap = spools.cap();
        if spools.pending(key.job_id) == 0 {
            info!(
                job_id = key.job_id,
                cap_bytes = cap,
                "the master has not taken output for a while: spooling the job's output on this node"
            );
        }
        spools.put(key.job_id, data).map_err(|e| match e {
            SpoolRefused::Full => format!("the job's spool holds its bound of {cap} bytes"),
            SpoolRefused::Io(e) => format!("cannot write the spool: {e}"),
        })
    }

    /// Count `len` bytes of a rank's stream as lost, with a warning now and then.
    fn discard(&mut self, key: RankKey, stream: Stream, len: u64, why: &str, now: Instant) {
        let Some(r) = self.per_rank.get_mut(&key) else {
            return;
        };
        r.lost[stream as usize] += len;
        if r.warned_at
            .is_none_or(|t| now.duration_since(t) >= DROP_WARN_EVERY)
        {
            r.warned_at = Some(now);
            warn!(
                job_id = key.job_id,
                rank = key.rank,
                ?stream,
                lost_bytes = r.lost[stream as usize],
                "the master is not taking output and {why}: discarding the rank's output (the job will say how much)"
            );
        }
    }

    /// Take up to about `PUSH_BYTES` of output from the front of the queue (stopping at
    /// an exit), grouped into one push per job. Adjacent chunks of the same rank and
    /// stream are merged; order within each stream is kept.
    fn take_pushes(&mut self) -> Vec<OutputBatch> {
        let mut pushes: Vec<OutputBatch> = Vec::new();
        let mut taken = 0usize;
        while taken < PUSH_BYTES && matches!(self.queue.front(), Some(Item::Output { .. })) {
            let Some(Item::Output {
                key,
                stream,
                offset,
                chunk,
                ..
            }) = self.queue.pop_front()
            else {
                unreachable!("front was output");
            };
            let len = chunk.len();
            taken += len;
            self.output_bytes -= len;
            let data = self.chunk_bytes(key, stream, chunk);
            if let Some(r) = self.per_rank.get(&key)
                && r.ended
                && r.queued == 0
                && r.spooled == 0
            {
                self.per_rank.remove(&key);
            }
            let Some(data) = data else { continue };
            let push = match pushes.iter_mut().position(|b| b.job_id == key.job_id) {
                Some(i) => &mut pushes[i],
                None => {
                    pushes.push(OutputBatch {
                        job_id: key.job_id,
                        chunks: Vec::new(),
                    });
                    pushes.last_mut().expect("just pushed")
                }
            };
            match push.chunks.last_mut() {
                // Only contiguous bytes merge: a gap (output lost) keeps its offset.
                Some(last)
                    if last.rank == key.rank
                        && last.stream == stream as i32
                        && last.offset.map(|o| o + last.data.len() as u64) == Some(offset) =>
                {
                    last.data.extend_from_slice(&data);
                }
                _ => push.chunks.push(Output {
                    rank: key.rank,
                    stream: stream as i32,
                    data,
                    offset: Some(offset),
                }),
            }
        }
        pushes
    }

    /// A chunk's bytes, taken out of memory or read back from the spool (`None`, counted
    /// as lost, if the spool cannot give them back).
    fn chunk_bytes(&mut self, key: RankKey, stream: Stream, chunk: Chunk) -> Option<Vec<u8>> {
        match chunk {
            Chunk::Mem(data) => {
                if let Some(r) = self.per_rank.get_mut(&key) {
                    r.queued -= data.len();
                }
                Some(data)
            }
            Chunk::Spooled { at, len } => {
                if let Some(r) = self.per_rank.get_mut(&key) {
                    r.spooled -= len;
                }
                let read = self
                    .spools
                    .as_mut()
                    .map(|s| s.take(key.job_id, at, len))
                    .unwrap_or_else(|| Err(std::io::Error::other("no spool")));
                match read {
                    Ok(data) => Some(data),
                    Err(e) => {
                        let why = format!("its spool cannot be read back ({e})");
                        self.discard(key, stream, len as u64, &why, Instant::now());
                        None
                    }
                }
            }
        }
    }
}

/// Copy one of a rank's pipes into the outbox until EOF, never more than the outbox has
/// room for (`Outbox::wait_room`).
pub async fn pump(mut pipe: impl AsyncRead + Unpin, key: RankKey, stream: Stream, outbox: &Outbox) {
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        outbox.wait_room(key).await;
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
mod tests;
