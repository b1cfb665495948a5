//! State shared between the API threads and the progress thread.
//!
//! API threads only enqueue (sends) or post (receives) and then wait; the
//! progress thread owns every socket. The two meet in three places: the send
//! queues (`sendq`), the receive matching (`mailbox`, with `cond` for
//! waiters) and the wake-up eventfd.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};

use crate::abi::{StatePage, TablePage};
use crate::mailbox::Mailbox;

/// Completion of a send: set once the receiver has acknowledged the message
/// (it is in the receiver's buffers).
#[derive(Default)]
pub struct SendDone {
    pub done: AtomicBool,
}

/// A message the API accepted and the progress thread has not yet injected.
pub struct OutMsg {
    pub tag: i32,
    pub data: Vec<u8>,
    /// 1-based index among the messages posted to this destination: the
    /// quiesce injects messages up to the count seen at its start.
    pub seq: u64,
    pub done: Option<Arc<SendDone>>,
}

pub struct SendQueues {
    pub queues: Vec<VecDeque<OutMsg>>,
    /// Messages ever posted per destination.
    pub posted: Vec<u64>,
}

pub const RUN: u8 = 0;
/// Finish what was posted, then stop.
pub const DRAIN: u8 = 1;
/// Stop now (a `Comm` dropped without finalize).
pub const ABANDON: u8 = 2;

pub struct Shared {
    pub rank: usize,
    pub size: usize,
    pub mailbox: Mutex<Mailbox>,
    /// Signalled (under `mailbox`) when a receive slot or a send completes.
    pub cond: Condvar,
    pub sendq: Mutex<SendQueues>,
    wake_fd: OwnedFd,
    pub state: StatePage,
    pub table: TablePage,
    pub spin_us: AtomicU64,
    pub shutdown: AtomicU8,
    /// A transport failure the API reports instead of waiting forever.
    pub fatal: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(
        rank: usize,
        size: usize,
        state: StatePage,
        table: TablePage,
        spin_us: u64,
    ) -> io::Result<Shared> {
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared {
            rank,
            size,
            mailbox: Mutex::new(Mailbox::default()),
            cond: Condvar::new(),
            sendq: Mutex::new(SendQueues {
                queues: (0..size).map(|_| VecDeque::new()).collect(),
                posted: vec![0; size],
            }),
            wake_fd: unsafe { OwnedFd::from_raw_fd(fd) },
            state,
            table,
            spin_us: AtomicU64::new(spin_us),
            shutdown: AtomicU8::new(RUN),
            fatal: Mutex::new(None),
        })
    }

    pub fn wake_fd(&self) -> &OwnedFd {
        &self.wake_fd
    }

    /// Wake the progress thread out of its poll.
    pub fn wake(&self) {
        let one: u64 = 1;
        // EAGAIN means the counter is saturated: the thread is woken anyway.
        unsafe { libc::write(self.wake_fd.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }

    /// Progress thread: consume pending wake-ups.
    pub fn drain_wake(&self) {
        let mut v: u64 = 0;
        unsafe { libc::read(self.wake_fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
    }

    /// Accept a message for `dest`: count it as posted, queue it, wake the progress thread.
    pub fn post_send(&self, dest: usize, tag: i32, data: Vec<u8>, done: Option<Arc<SendDone>>) {
        {
            let mut q = self.sendq.lock().unwrap();
            q.posted[dest] += 1;
            let seq = q.posted[dest];
            // Counted before the call returns and before the message can be
            // delivered anywhere, so delivered <= posted holds at every instant.
            self.state.layout().posted_sends.fetch_add(1, SeqCst);
            q.queues[dest].push_back(OutMsg {
                tag,
                data,
                seq,
                done,
            });
        }
        self.wake();
    }

    /// Wake every waiter (after completing slots or sends).
    pub fn notify_all(&self) {
        let _g = self.mailbox.lock().unwrap();
        self.cond.notify_all();
    }

    pub fn set_fatal(&self, msg: String) {
        let mut f = self.fatal.lock().unwrap();
        if f.is_none() {
            eprintln!("gang-msg rank {}: {msg}", self.rank);
            *f = Some(msg);
        }
        drop(f);
        self.notify_all();
    }

    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap().clone()
    }

    /// Master clock now: CLOCK_REALTIME + the agent's offset.
    pub fn master_now_ns(&self) -> u64 {
        let off = self.table.read().realtime_offset_ns;
        (realtime_ns() as i64 + off).max(0) as u64
    }
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn realtime_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

pub fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}
