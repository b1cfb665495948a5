//! The progress thread: one per process, owner of every socket.
//!
//! Each turn it takes what the API queued, watches the table page for a
//! boundary (see `quiesce.rs`), injects queued messages, polls, and then
//! drains every readable socket into the mailbox, acknowledges what arrived,
//! and writes what it can. It never waits on a peer: a full socket or a
//! silent peer just leaves work for the next turn.

mod frames;
mod links;

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
