//! The progress thread: one per process, owner of every socket.
//!
//! Each turn it takes what the API queued, watches the table page for a
//! boundary (see `quiesce.rs`), injects queued messages, polls, and then
//! drains every readable socket into the mailbox, acknowledges what arrived,
//! and writes what it can. It never waits on a peer: a full socket or a
//! silent peer just leaves work for the next turn.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

use crate::abi::Endpoint;
use crate::config::Config;
use crate::mailbox::Msg;
use crate::shared::{ABANDON, DRAIN, OutMsg, SendDone, Shared};
use crate::switch_state::{Phase, Switch};
use crate::transport::{self, Listeners};
use crate::wire::{Frame, Header, Kind, OutQueue, Reader};

/// Stop moving messages into a connection's queue past this many unwritten
/// bytes: the rest waits in `pending`, where a quiesce can still hold it.
const OUT_HIGH: usize = 256 << 10;
/// Read at most this much from one socket per turn, so one busy peer does not
/// starve the others (the next turn comes at once: the socket stays readable).
const READ_BUDGET: usize = 4 << 20;
/// Longest poll: how soon a boundary newly written to the table page is seen.
pub const TABLE_POLL_NS: u64 = 1_000_000;
const CONNECT_RETRY: Duration = Duration::from_millis(10);
const CONNECT_GIVE_UP: u32 = 3000;
/// Past `CONNECT_GIVE_UP`, how often a peer owed nothing is tried again.
const CONNECT_RETRY_IDLE: Duration = Duration::from_secs(1);

pub struct Conn {
    pub fd: OwnedFd,
    pub out: OutQueue,
    rd: Reader,
    /// We promised no more data frames on this connection.
    pub fin_sent: bool,
    /// The peer promised the same.
    pub fin_recv: bool,
    /// The peer's Fin is answered once our messages up to this sequence
    /// number are on the connection: what we owe it before the close.
    fin_after: Option<u64>,
}

impl Conn {
    fn new(fd: OwnedFd) -> Conn {
        Conn {
            fd,
            out: OutQueue::default(),
            rd: Reader::default(),
            fin_sent: false,
            fin_recv: false,
            fin_after: None,
        }
    }

    pub fn send_fin(&mut self) {
        if !self.fin_sent {
            self.out.push(
                Header {
                    kind: Kind::Fin,
                    tag: 0,
                    aux: 0,
                    len: 0,
                },
                Vec::new(),
            );
            self.fin_sent = true;
        }
    }
}

pub struct Peer {
    pub ep: Endpoint,
    pub tcp: bool,
    pub conn: Option<Conn>,
    /// Taken from the shared queue, not yet injected.
    pub pending: VecDeque<OutMsg>,
    /// Data frames put on a connection / acknowledged by the peer (cumulative
    /// over all connections to it).
    pub injected: u64,
    pub acked: u64,
    pub unacked: VecDeque<(u64, Option<Arc<SendDone>>)>,
    pub unacked_bytes: u64,
    /// Data frames received from the peer / acknowledged to it.
    pub received: u64,
    ack_sent: u64,
    /// The peer closed without a Fin: it exited (or died).
    pub gone: bool,
    /// After a planned close: the boundary it was closed for. We reconnect
    /// only once we have seen it pass, so a connection opened by a rank that
    /// answered a Fin (or quiesced late) cannot land in the backlog of a
    /// peer that has saved its context, where neither side could close it.
    reconnect_after: u64,
    next_connect: Instant,
    connect_fails: u32,
}

impl Peer {
    /// The connection was closed by a Fin exchange for boundary `b`.
    /// Messages to this peer not yet acknowledged (queued or on the wire).
    fn outstanding(&self) -> u64 {
        self.pending.len() as u64 + self.injected - self.acked
    }

    pub fn closed_for(&self, b: u64) -> bool {
        self.conn.is_none() && b != 0 && self.reconnect_after == b
    }
}

pub struct Progress {
    pub sh: Arc<Shared>,
    pub cfg: Config,
    lst: Listeners,
    pub peers: Vec<Peer>,
    /// Accepted connections whose Hello has not arrived yet.
    accepting: Vec<Conn>,
    /// A peer's previous connection, replaced by its reconnect before we
    /// read its last frames (acks, its Fin) and its EOF.
    draining: Vec<(usize, Conn)>,
    pub sw: Switch,
    frames: Vec<Frame>,
}

impl Progress {
    pub fn new(sh: Arc<Shared>, cfg: Config, lst: Listeners, eps: Vec<Endpoint>) -> Progress {
        let now = Instant::now();
        let peers = eps
            .into_iter()
            .map(|ep| Peer {
                tcp: transport::use_tcp(&cfg, &ep),
                ep,
                conn: None,
                pending: VecDeque::new(),
                injected: 0,
                acked: 0,
                unacked: VecDeque::new(),
                unacked_bytes: 0,
                received: 0,
                ack_sent: 0,
                gone: false,
                reconnect_after: 0,
                next_connect: now,
                connect_fails: 0,
            })
            .collect();
        let sw = Switch::new(cfg.size);
        Progress {
            sh,
            cfg,
            lst,
            peers,
            accepting: Vec::new(),
            draining: Vec::new(),
            sw,
            frames: Vec::new(),
        }
    }

    pub fn run(mut self) {
        loop {
            let stop = self.sh.shutdown.load(Acquire);
            if stop == ABANDON || (stop == DRAIN && self.drained()) {
                break;
            }
            self.take_queued();
            self.tick_switch();
            self.connect_peers();
            self.inject();
            self.flush_writes();
            // A quiesce with nothing in flight completes here, without
            // waiting for the poll below to time out.
            self.advance_quiesce();
            let timeout = self.switch_timeout_ns().min(TABLE_POLL_NS);
            self.poll(timeout);
            self.sh.drain_wake();
            self.accept();
            self.read_all();
            self.queue_acks();
            self.flush_writes();
            self.close_finished();
            self.advance_quiesce();
            self.publish_counters();
        }
    }

    /// Nothing posted is left unsent or unacknowledged, and every ack is out.
    fn drained(&self) -> bool {
        self.sh
            .sendq
            .lock()
            .unwrap()
            .queues
            .iter()
            .all(|q| q.is_empty())
            && self.sw.saved.is_none()
            && self.peers.iter().enumerate().all(|(i, p)| {
                i == self.sh.rank
                    || p.gone
                    || (p.pending.is_empty()
                        && p.acked == p.injected
                        && p.received == p.ack_sent
                        && p.conn.as_ref().is_none_or(|c| c.out.is_empty()))
            })
    }

    fn take_queued(&mut self) {
        let mut q = self.sh.sendq.lock().unwrap();
        for (d, queue) in q.queues.iter_mut().enumerate() {
            if !queue.is_empty() {
                self.peers[d].pending.append(queue);
            }
        }
    }

    /// Whether connections may be opened (connect, accept): not from the
    /// save's close until the resume, so a peer that reconnects early waits
    /// in our backlog instead of undoing the save.
    fn may_connect(&self) -> bool {
        matches!(self.sw.phase, Phase::Running | Phase::Flushing)
    }

    /// Lower ranks (re)connect to higher ones.
    fn connect_peers(&mut self) {
        if !self.may_connect() {
            return;
        }
        let now = Instant::now();
        // A connection closed for boundary b is reopened once b (plus the grace every
        // rank resumes after) is past on the master clock. Not "once this rank counted b
        // as passed": a boundary the agent moves or cancels (the matrix changed, a job
        // ended) is never counted, and a connection closed for it stayed closed for good,
        // its peer's messages queued forever (the save-restore halo that hung).
        let reopen_from = self.sh.master_now_ns().saturating_sub(self.cfg.grace_ns);
        for d in self.sh.rank + 1..self.sh.size {
            let p = &mut self.peers[d];
            if p.conn.is_some() || p.gone || now < p.next_connect || reopen_from < p.reconnect_after
            {
                continue;
            }
            match transport::connect(&p.ep, p.tcp) {
                Ok(fd) => {
                    let mut c = Conn::new(fd);
                    let hello = transport::hello_payload(&self.cfg.job_id, &p.ep.token);
                    c.out.push(
                        Header {
                            kind: Kind::Hello,
                            tag: 0,
                            aux: self.sh.rank as u64,
                            len: hello.len() as u32,
                        },
                        hello,
                    );
                    p.conn = Some(c);
                    p.connect_fails = 0;
                }
                Err(e) => {
                    p.connect_fails += 1;
                    p.next_connect = now + CONNECT_RETRY;
                    if p.connect_fails >= CONNECT_GIVE_UP {
                        if p.outstanding() > 0 {
                            p.gone = true;
                            self.sh
                                .set_fatal(format!("cannot connect to rank {d} for 30 s: {e}"));
                        } else {
                            // Owing it nothing: it may simply have finished (finalized and
                            // exited) while this rank runs on. Failing a correct program for
                            // that would be wrong; keep trying, slowly, in case it is back.
                            p.next_connect = now + CONNECT_RETRY_IDLE;
                        }
                    }
                }
            }
        }
    }

    /// Move queued messages onto connections, as far as the switch phase allows.
    fn inject(&mut self) {
        let me = self.sh.rank;
        let mut completed = false;
        for d in 0..self.peers.len() {
            let limit = self.sw.inject_limit(d);
            if d == me {
                // To self: straight into the mailbox, done at once.
                let p = &mut self.peers[d];
                let mut mb = None;
                while p.pending.front().is_some_and(|m| m.seq <= limit) {
                    let m = p.pending.pop_front().unwrap();
                    let mb = mb.get_or_insert_with(|| self.sh.mailbox.lock().unwrap());
                    mb.deliver(
                        Msg {
                            src: me,
                            tag: m.tag,
                            data: m.data,
                        },
                        &self.sh.state,
                    );
                    if let Some(done) = m.done {
                        done.done.store(true, Release);
                    }
                    p.injected += 1;
                    p.acked += 1;
                    completed = true;
                }
                continue;
            }
            let p = &mut self.peers[d];
            let Some(c) = p.conn.as_mut() else { continue };
            let limit = limit.min(c.fin_after.unwrap_or(u64::MAX));
            while !c.fin_sent
                && c.out.bytes() < OUT_HIGH
                && p.pending.front().is_some_and(|m| m.seq <= limit)
            {
                let m = p.pending.pop_front().unwrap();
                let len = m.data.len() as u64;
                c.out.push(
                    Header {
                        kind: Kind::Data,
                        tag: m.tag,
                        aux: 0,
                        len: len as u32,
                    },
                    m.data,
                );
                p.injected += 1;
                p.unacked.push_back((len, m.done));
                p.unacked_bytes += len;
            }
            if c.fin_after.is_some() && p.pending.front().is_none_or(|m| m.seq > limit) {
                c.send_fin();
            }
        }
        if completed {
            self.sh.notify_all();
        }
    }

    fn poll(&mut self, timeout_ns: u64) {
        let mut fds = vec![libc::pollfd {
            fd: self.sh.wake_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if self.may_connect() {
            for fd in transport::listener_fds(&self.lst) {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        let conns = self.peers.iter().filter_map(|p| p.conn.as_ref());
        for c in conns
            .chain(self.accepting.iter())
            .chain(self.draining.iter().map(|(_, c)| c))
        {
            let events = libc::POLLIN | if c.out.is_empty() { 0 } else { libc::POLLOUT };
            fds.push(libc::pollfd {
                fd: c.fd.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as _,
            tv_nsec: (timeout_ns % 1_000_000_000) as _,
        };
        // Readiness is not used beyond waking: every turn tries every socket
        // (non-blocking), which costs a few syscalls per peer and keeps the
        // loop free of bookkeeping between poll slots and connections.
        unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as _, &ts, std::ptr::null()) };
    }

    fn accept(&mut self) {
        if !self.may_connect() {
            return;
        }
        loop {
            match transport::accept(&self.lst) {
                Ok(Some(fd)) => self.accepting.push(Conn::new(fd)),
                Ok(None) => break,
                Err(e) => {
                    eprintln!("gang-msg rank {}: accept: {e}", self.sh.rank);
                    break;
                }
            }
        }
        let mut i = 0;
        while i < self.accepting.len() {
            let mut frames = Vec::new();
            let c = &mut self.accepting[i];
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(r.as_ref().map_or(0, |r| r.bytes) as u64, Relaxed);
            if frames.is_empty() {
                match r {
                    Ok(o) if !o.eof => i += 1,
                    _ => {
                        self.accepting.swap_remove(i);
                    }
                }
                continue;
            }
            let c = self.accepting.swap_remove(i);
            let h = &frames[0];
            let from = h.hdr.aux as usize;
            let ok = h.hdr.kind == Kind::Hello
                && from < self.sh.rank
                && transport::check_hello(&h.payload, &self.cfg.job_id, &self.lst.endpoint.token);
            if !ok {
                eprintln!(
                    "gang-msg rank {}: refused a connection with a bad hello",
                    self.sh.rank
                );
                continue;
            }
            let p = &mut self.peers[from];
            if let Some(old) = p.conn.replace(c) {
                self.draining.push((from, old));
            }
            p.gone = false;
            // Frames that came in behind the Hello in the same read.
            let rest: Vec<Frame> = frames.into_iter().skip(1).collect();
            self.handle_frames(from, false, rest);
        }
    }

    fn read_all(&mut self) {
        for d in 0..self.peers.len() {
            let Some(c) = self.peers[d].conn.as_mut() else {
                continue;
            };
            let mut frames = std::mem::take(&mut self.frames);
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            let bytes = r.as_ref().map_or(0, |r| r.bytes);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(bytes as u64, Relaxed);
            self.handle_frames(d, false, frames.drain(..));
            self.frames = frames;
            match r {
                Ok(o) if !o.eof => {}
                Ok(_) => self.lost_conn(d, None),
                Err(e) => self.lost_conn(d, Some(e.to_string())),
            }
        }
        let mut i = 0;
        while i < self.draining.len() {
            let (d, c) = &mut self.draining[i];
            let d = *d;
            let mut frames = Vec::new();
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(r.as_ref().map_or(0, |r| r.bytes) as u64, Relaxed);
            self.handle_frames(d, true, frames);
            match r {
                Ok(o) if !o.eof => i += 1,
                _ => {
                    self.draining.swap_remove(i);
                }
            }
        }
    }

    /// The connection to `d` ended: after both Fins it is a planned close
    /// (reconnected later); otherwise the peer is gone.
    fn lost_conn(&mut self, d: usize, err: Option<String>) {
        let boundary = self.sh.table.read().switch_out_at_ns;
        let p = &mut self.peers[d];
        let planned = p.conn.as_ref().is_some_and(|c| c.fin_recv);
        p.conn = None;
        if planned {
            p.reconnect_after = boundary;
            return;
        }
        p.gone = true;
        // A peer that finalized and exited closes its end: a write to it then fails
        // (EPIPE: a save-restore Fin sent at the next boundary) just as a read sees EOF.
        // Neither is an error when nothing to it is undelivered.
        let outstanding = p.outstanding();
        if outstanding > 0 {
            self.sh.set_fatal(format!(
                "rank {d} closed its connection with {outstanding} message(s) to it undelivered{}",
                err.map(|e| format!(": {e}")).unwrap_or_default()
            ));
        }
    }

    fn handle_frames(&mut self, d: usize, draining: bool, frames: impl IntoIterator<Item = Frame>) {
        let mut woken = false;
        let mut mb = None;
        for f in frames {
            match f.hdr.kind {
                Kind::Data if !draining => {
                    let mb = mb.get_or_insert_with(|| self.sh.mailbox.lock().unwrap());
                    woken |= mb
                        .deliver(
                            Msg {
                                src: d,
                                tag: f.hdr.tag,
                                data: f.payload,
                            },
                            &self.sh.state,
                        )
                        .is_some();
                    self.peers[d].received += 1;
                }
                Kind::Ack => {
                    let p = &mut self.peers[d];
                    while p.acked < f.hdr.aux {
                        let (len, done) = p
                            .unacked
                            .pop_front()
                            .expect("peer acknowledged more than was sent");
                        p.unacked_bytes -= len;
                        p.acked += 1;
                        if let Some(done) = done {
                            done.done.store(true, Release);
                            woken = true;
                        }
                    }
                }
                Kind::Fin if !draining => {
                    // The peer is saving its context and waits for our Fin to
                    // close. Answer once what we owe it is on the connection:
                    // in a flush, the messages posted before it began; else
                    // whatever is queued now. Later messages wait for the next
                    // connection.
                    let owed = match self.sw.phase {
                        Phase::Flushing => self.sw.inject_limit(d),
                        _ => self.peers[d].pending.back().map_or(0, |m| m.seq),
                    };
                    if let Some(c) = self.peers[d].conn.as_mut() {
                        c.fin_recv = true;
                        if !c.fin_sent {
                            c.fin_after = Some(owed);
                        }
                    }
                }
                Kind::Fin => {}
                kind => {
                    self.sh
                        .set_fatal(format!("rank {d} sent an unexpected {kind:?} frame"));
                }
            }
        }
        drop(mb);
        if woken {
            self.sh.notify_all();
        }
    }

    fn queue_acks(&mut self) {
        for p in &mut self.peers {
            if p.received > p.ack_sent
                && let Some(c) = p.conn.as_mut()
            {
                c.out.push(
                    Header {
                        kind: Kind::Ack,
                        tag: 0,
                        aux: p.received,
                        len: 0,
                    },
                    Vec::new(),
                );
                p.ack_sent = p.received;
            }
        }
    }

    fn flush_writes(&mut self) {
        let mut written = 0;
        let mut failed = Vec::new();
        for (d, p) in self.peers.iter_mut().enumerate() {
            if let Some(c) = p.conn.as_mut().filter(|c| !c.out.is_empty()) {
                match c.out.write_some(&c.fd) {
                    Ok(n) => written += n,
                    Err(e) => failed.push((d, e.to_string())),
                }
            }
        }
        self.sh
            .state
            .layout()
            .bytes_written
            .fetch_add(written as u64, Relaxed);
        for (d, e) in failed {
            self.lost_conn(d, Some(e));
        }
    }

    /// Close connections on which both sides sent Fin, once our data on it
    /// is acknowledged and our last frames are written.
    fn close_finished(&mut self) {
        let boundary = self.sh.table.read().switch_out_at_ns;
        for p in &mut self.peers {
            let done = p.conn.as_ref().is_some_and(|c| {
                c.fin_sent && c.fin_recv && c.out.is_empty() && p.acked == p.injected
            });
            if done {
                p.conn = None;
                p.reconnect_after = boundary;
            }
        }
    }

    pub fn publish_counters(&self) {
        let unacked: u64 = self.peers.iter().map(|p| p.unacked_bytes).sum();
        self.sh.state.layout().unacked_bytes.store(unacked, Relaxed);
    }

    /// Whether every live peer has a connection (the end of a restore).
    pub fn all_connected(&self) -> bool {
        self.peers
            .iter()
            .enumerate()
            .all(|(d, p)| d == self.sh.rank || p.gone || p.conn.is_some())
    }

    /// Whether every connection is closed (the end of a save).
    pub fn all_closed(&self) -> bool {
        self.peers.iter().all(|p| p.conn.is_none()) && self.draining.is_empty()
    }
}
