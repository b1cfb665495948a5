//! What a switch does to one rank: SIGSTOP/SIGCONT to its process group, renice the
//! group, or freeze/thaw its cgroup. Every call here is one system call, allocates
//! nothing and takes no lock, so the switch thread can make it on the hot path.
//!
//! A `Target` remembers what the switch thread last did to it (`state`), so the thread
//! acts only on transitions and undoes exactly what it did. Only the switch thread
//! changes `state`; `release` (cancel, shutdown) continues the rank whatever it is,
//! without touching it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use gang_core::GangMode;
use gang_msg::abi::{StatePage, TablePage};

use crate::ranks::RankKey;
use crate::rt::clock::realtime_ns;
use crate::switch::freezer::RankCgroup;
use crate::switch::plan::Method;

/// Niceness added to a PRIORITY job outside its rows (AP/Linux).
pub const PRIORITY_PENALTY: i32 = 15;

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const NICED: u8 = 2;
const FROZEN: u8 = 3;

fn state_of(m: Method) -> u8 {
    match m {
        Method::Stop => STOPPED,
        Method::Priority => NICED,
        Method::Freeze => FROZEN,
    }
}

/// One rank the switch thread may act on.
#[derive(Debug)]
pub struct Target {
    pub key: RankKey,
    /// The job the slice tables name it by: a step runs in its allocation's slots.
    pub slot_job: u64,
    /// The mode it was launched with: how the plan switches it.
    pub mode: GangMode,
    pub pgid: i32,
    /// The nice value the rank started with (the agent's).
    pub base_nice: i32,
    pub cgroup: Option<RankCgroup>,
    /// The rank's messaging-library pages: its next switch-out goes into the table page,
    /// and its state page says whether it quiesced in time.
    pub msg: Option<MsgPages>,
    state: AtomicU8,
}

/// A rank's shared pages with the messaging library.
#[derive(Clone)]
pub struct MsgPages {
    pub table: Arc<TablePage>,
    pub state: Arc<StatePage>,
}

impl std::fmt::Debug for MsgPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MsgPages")
    }
}

/// Timing and outcome of the actions of one switch, on the master clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct Acts {
    pub offset_ns: i64,
    pub count: u32,
    /// Just before the first system call.
    pub first_ns: i64,
    /// Just after the last one returned.
    pub last_ns: i64,
    pub errors: u32,
    pub last_errno: i32,
}

impl Acts {
    pub fn new(offset_ns: i64) -> Self {
        Acts {
            offset_ns,
            ..Acts::default()
        }
    }

    fn act(&mut self, call: impl FnOnce() -> Result<(), i32>) {
        if self.count == 0 {
            self.first_ns = realtime_ns() + self.offset_ns;
        }
        let r = call();
        self.last_ns = realtime_ns() + self.offset_ns;
        self.count += 1;
        match r {
            // The group is gone (the rank is exiting): nothing to switch.
            Ok(()) | Err(libc::ESRCH) => {}
            Err(errno) => {
                self.errors += 1;
                self.last_errno = errno;
            }
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn killpg(pgid: i32, sig: i32) -> Result<(), i32> {
    // SAFETY: kill(2) with a negative pid signals the group; no memory is passed.
    if unsafe { libc::kill(-pgid, sig) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn renice(pgid: i32, nice: i32) -> Result<(), i32> {
    // SAFETY: setpriority(2) on a process group; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PGRP as _, pgid as libc::id_t, nice) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

impl Target {
    pub fn new(
        key: RankKey,
        mode: GangMode,
        pgid: i32,
        base_nice: i32,
        cgroup: Option<RankCgroup>,
    ) -> Self {
        Target {
            key,
            slot_job: key.job_id,
            mode,
            pgid,
            base_nice,
            cgroup,
            msg: None,
            state: AtomicU8::new(RUNNING),
        }
    }

    fn niced(&self) -> i32 {
        (self.base_nice + PRIORITY_PENALTY).min(19)
    }

    /// Whether the switch thread last left it switched out.
    pub fn is_out(&self) -> bool {
        self.state.load(Ordering::Relaxed) != RUNNING
    }

    fn apply(&self, state: u8, acts: &mut Acts) {
        match state {
            STOPPED => acts.act(|| killpg(self.pgid, libc::SIGSTOP)),
            NICED => acts.act(|| renice(self.pgid, self.niced())),
            FROZEN => match &self.cgroup {
                Some(cg) => acts.act(|| cg.set_frozen(true)),
                // The plan only says Freeze for targets with a cgroup.
                None => acts.act(|| killpg(self.pgid, libc::SIGSTOP)),
            },
            _ => {}
        }
    }

    fn undo(&self, state: u8, acts: &mut Acts) {
        match state {
            STOPPED => acts.act(|| killpg(self.pgid, libc::SIGCONT)),
            NICED => acts.act(|| renice(self.pgid, self.base_nice)),
            FROZEN => match &self.cgroup {
                Some(cg) => acts.act(|| cg.set_frozen(false)),
                None => acts.act(|| killpg(self.pgid, libc::SIGCONT)),
            },
            _ => {}
        }
    }

    /// Switch thread: make sure it is switched out by `method`.
    pub fn switch_out(&self, method: Method, acts: &mut Acts) {
        let want = state_of(method);
        let cur = self.state.load(Ordering::Relaxed);
        if cur == want {
            return;
        }
        if cur != RUNNING {
            self.undo(cur, acts);
        }
        self.apply(want, acts);
        self.state.store(want, Ordering::Relaxed);
    }

    /// Switch thread: make sure it runs.
    pub fn switch_in(&self, acts: &mut Acts) {
        let cur = self.state.load(Ordering::Relaxed);
        if cur == RUNNING {
            return;
        }
        self.undo(cur, acts);
        self.state.store(RUNNING, Ordering::Relaxed);
    }

    /// Off the switch thread (cancel, shutdown): continue the rank whatever was done to
    /// it, so it can act on a SIGTERM (a frozen or stopped process cannot).
    pub fn release(&self) {
        let _ = killpg(self.pgid, libc::SIGCONT);
        if let Some(cg) = &self.cgroup {
            let _ = cg.set_frozen(false);
        }
        if self.state.load(Ordering::Relaxed) == NICED {
            let _ = renice(self.pgid, self.base_nice);
        }
    }
}

/// The agent's own nice value (what its ranks inherit).
pub fn own_nice() -> i32 {
    // getpriority can legitimately return -1: clear errno first to tell.
    // SAFETY: plain system calls; __errno_location is the thread's errno.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS as _, 0);
        if n == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            n
        }
    }
}
