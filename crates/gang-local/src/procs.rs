//! Starting, signalling and reaping the cluster's processes so that none outlives it.
//!
//! - Every process is forked by one thread, the [`Spawner`], that lives exactly as long as
//!   the cluster, and asks for SIGTERM when that thread ends (`PR_SET_PDEATHSIG` fires
//!   when the *thread* that forked a child exits, not its process). So if the owner of
//!   the cluster dies without tearing it down (SIGKILL, abort), the daemons still stop,
//!   and the agents stop their ranks.
//! - Every process leads its own process group, and signals go to the whole group, so a
//!   helper a daemon forks goes with it. A group is only signalled while its leader is
//!   not reaped yet: until then its pid (the group's id) cannot be handed to anybody
//!   else. Once a leader has exited, the rest of its group is SIGKILLed, and only then is
//!   the leader reaped.
//! - `spawn` returns after the child has exec'd (std waits for that), so by then the
//!   child leads its group and is in the caller's books: there is no moment when a
//!   started process is not known.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use crate::logs::describe;

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// The thread that forks every process of one cluster.
#[derive(Debug)]
pub(crate) struct Spawner {
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Spawner {
    pub fn new() -> io::Result<Spawner> {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("gang-local-spawn".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // The caller waits for the answer, so the Child is never lost.
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        Ok(Spawner {
            requests: Some(tx),
            thread: Some(thread),
        })
    }

    /// Start `cmd` (which must set `process_group(0)`) from the spawner thread.
    pub fn spawn(&self, mut cmd: Command) -> io::Result<Proc> {
        let owner = std::process::id();
        let no_signals = SigSet::empty();
        // SAFETY: runs in the forked child before exec and only makes async-signal-safe
        // system calls (pthread_sigmask, prctl, getppid); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // The mask survives fork and exec (std does not reset it): an owner that
                // blocks SIGTERM to take it on a thread of its own (gangctl) would make
                // daemons deaf to the SIGTERM that stops them.
                no_signals.thread_set_mask()?;
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
                // The owner may have died between fork and prctl; then no signal will
                // come, so do not run at all.
                if nix::unistd::getppid().as_raw() as u32 != owner {
                    return Err(io::Error::from(Errno::ESRCH));
                }
                Ok(())
            });
        }
        let gone = || io::Error::other("the process-starting thread of the cluster is gone");
        let (tx, rx) = mpsc::channel();
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send((cmd, tx))
            .map_err(|_| gone())?;
        let child = rx.recv().map_err(|_| gone())??;
        Ok(Proc {
            child,
            status: None,
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A started process, leader of its own process group.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    /// Set once reaped; from then on its group is never signalled.
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The pid while the process is not reaped (running, or exited and not yet polled).
    pub fn unreaped_pid(&self) -> Option<u32> {
        self.status.is_none().then(|| self.child.id())
    }

    /// Its exit status, if it has exited. An exited process's group is SIGKILLed (a
    /// helper it left behind) before the process is reaped.
    pub fn poll(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(_) => {
                let _ = killpg(pid, Signal::SIGKILL);
            }
            // Reaped behind our back (ECHILD); std's wait below says what it knows.
            Err(_) => {}
        }
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(Some(status))
    }

    /// Send `signal` to its process group, unless it is reaped already.
    pub fn signal(&mut self, signal: Signal) {
        if self.status.is_some() {
            return;
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        if killpg(pid, signal) == Err(Errno::ESRCH) {
            // Not a group leader (it cannot be one only before setpgid in the child,
            // which precedes exec): the process alone.
            let _ = kill(pid, signal);
        }
    }

    /// Wait for it to exit until `deadline`; `None` if it still runs.
    pub fn wait_until(&mut self, deadline: Instant) -> io::Result<Option<ExitStatus>> {
        loop {
            if let Some(status) = self.poll()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL its group and reap it.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        self.signal(Signal::SIGKILL);
        match self.status {
            Some(s) => Ok(s),
            None => {
                let s = self.child.wait()?;
                self.status = Some(s);
                Ok(s)
            }
        }
    }
}

/// Signal a process and reap it, SIGKILLing its group after `grace`. Returns its status
/// and whether it had to be killed.
pub(crate) fn stop(
    proc: &mut Proc,
    signal: Signal,
    grace: Duration,
) -> io::Result<(ExitStatus, bool)> {
    if proc.poll()?.is_none() {
        proc.signal(signal);
    }
    if let Some(status) = proc.wait_until(Instant::now() + grace)? {
        return Ok((status, false));
    }
    Ok((proc.kill()?, true))
}

/// SIGTERM every process still running, wait until `grace` has passed for them all, then
/// SIGKILL what is left; what went wrong goes into `problems`.
pub(crate) fn stop_all(
    mut procs: Vec<(String, Proc)>,
    grace: Duration,
    problems: &mut Vec<String>,
) {
    for (_, child) in procs.iter_mut() {
        if matches!(child.poll(), Ok(None)) {
            child.signal(Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    for (name, child) in procs.iter_mut() {
        match child.wait_until(deadline) {
            Ok(Some(status)) => {
                let by_term = status.signal() == Some(Signal::SIGTERM as i32);
                if !(status.success() || by_term) {
                    problems.push(format!("{name} {}", describe(status)));
                }
            }
            Ok(None) => {
                let _ = child.kill();
                problems.push(format!(
                    "{name} did not exit within {} s of SIGTERM and was killed",
                    grace.as_secs_f64()
                ));
            }
            Err(e) => {
                let _ = child.kill();
                problems.push(format!("waiting for {name}: {e}"));
            }
        }
    }
}

/// The pid of a process that still runs.
pub(crate) fn running_pid(child: &mut Proc) -> Option<u32> {
    matches!(child.poll(), Ok(None)).then(|| child.id())
}

/// Start `cmd` at nice `nice` where permitted (root), else at the caller's priority.
///
/// On one host the master competes with every rank for the CPU, and the agents'
/// heartbeats (sent at real-time priority) keep coming however busy it is: at the ranks'
/// priority a 4x4 cluster of CPU-bound jobs left it answering heartbeats later than the
/// node timeout, and every agent's lease ran out, stopping its ranks. A master on a host of
/// its own does not need this.
pub fn ahead_of_ranks(cmd: &mut Command, nice: libc::c_int) {
    // SAFETY: one system call in the child before exec, on no shared data; its failure
    // (no privilege) leaves the priority as it was.
    unsafe {
        cmd.pre_exec(move || {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            Ok(())
        });
    }
}

/// Start `cmd` with SIGINT, SIGHUP, SIGTERM and SIGQUIT at their default actions, as a
/// terminal's foreground command has them, whatever this process inherited (a test suite
/// started with `&` or `nohup` ignores some, and its children would too). For tests that
/// signal what they start.
pub fn with_default_signals(cmd: &mut Command) {
    // SAFETY: signal(2) calls in the child before exec, on no shared data.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}
