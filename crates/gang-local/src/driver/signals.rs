//! SIGINT, SIGTERM and SIGHUP for `gangctl start`, taken by a thread of their own.
//!
//! [`catch_stop_signals`] blocks the three signals in the calling thread before any other
//! thread exists, so every thread inherits the block and none is ever interrupted by
//! them: a signal can no longer kill gangctl between a fork and the bookkeeping of the
//! new pid, or while a teardown is under way. One thread takes them with `sigwaitinfo`,
//! which also says where each came from, and hands them on as [`Caught`] events.
//!
//! A signal mask survives fork and exec (std does not reset it), so every child must
//! clear it before exec ([`unblock_all`]; `procs.rs` does it for the daemons), or it
//! would never see a SIGTERM.
//!
//! SIGINT or SIGHUP that gangctl (or prun) was started ignoring stays ignored
//! ([`ignored_at_start`]): that is how a shell starts a background command (`&`: SIGINT
//! ignored) and what `nohup` asks (SIGHUP ignored), and `nohup prun ... &` must outlive
//! the login that started it. SIGTERM is always taken: it is how one stops gangctl.

use std::io;

use nix::sys::signal::{SigSet, Signal};
use tokio::sync::mpsc;

/// The signals that stop `gangctl start`.
pub const STOP_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// A signal that reached gangctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caught {
    pub signal: Signal,
    /// Sent by the kernel (`SI_KERNEL`): a Ctrl-C or hangup at the terminal, which the
    /// whole foreground process group got, a command gangctl runs there included.
    pub from_terminal: bool,
}

impl Caught {
    /// The shell's code for a process ended by this signal: 128 + its number.
    pub fn exit_code(&self) -> i32 {
        128 + self.signal as i32
    }
}

/// The receiving end of the signal thread.
#[derive(Debug)]
pub struct StopSignals {
    rx: mpsc::UnboundedReceiver<Caught>,
}

impl StopSignals {
    /// The next signal.
    pub async fn recv(&mut self) -> Caught {
        match self.rx.recv().await {
            Some(c) => c,
            // The thread never ends, so the channel never closes.
            None => std::future::pending().await,
        }
    }
}

/// Whether `signal` was ignored (`SIG_IGN`) when this process started: for SIGINT and
/// SIGHUP, call it before anything installs a handler for them.
pub fn ignored_at_start(signal: Signal) -> bool {
    if signal == Signal::SIGTERM {
        return false;
    }
    // SAFETY: a null new action only reads the current one into `old`, plain data.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal as libc::c_int, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Clear the signal mask. For `pre_exec`: only pthread_sigmask, async-signal-safe.
pub fn unblock_all() -> io::Result<()> {
    SigSet::empty().thread_set_mask().map_err(io::Error::from)
}

/// Block [`STOP_SIGNALS`] (less those [`ignored_at_start`]) here and take them on a thread of their own. Call it before
/// any other thread starts (tokio's included): a thread started earlier keeps its mask
/// and could still be interrupted.
pub fn catch_stop_signals() -> io::Result<StopSignals> {
    let mut set = SigSet::empty();
    for s in STOP_SIGNALS.into_iter().filter(|s| !ignored_at_start(*s)) {
        set.add(s);
    }
    set.thread_block().map_err(io::Error::from)?;
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                // SAFETY: siginfo_t is plain data; all-zero is a valid value.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: both pointers are valid for the duration of the call.
                let n = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
                let Ok(signal) = Signal::try_from(n) else {
                    continue; // EINTR
                };
                let _ = tx.send(Caught {
                    signal,
                    from_terminal: info.si_code == libc::SI_KERNEL,
                });
            }
        })?;
    Ok(StopSignals { rx })
}
