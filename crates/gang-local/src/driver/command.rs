//! The command `gangctl start` runs against its cluster (`gangctl start --mesh 2x2 --
//! CMD`): spawned with `GANG_MASTER` set and our directory first in its `PATH`, then
//! watched until it exits, signals passed on to it, and killed past a grace once the
//! cluster is being stopped.

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Child;
use tokio::time::{Instant, Interval};

use super::cluster::Cluster;
use super::signals::{self, Caught, StopSignals};
use super::strays;

/// How long CMD may take to exit after gangctl passed it a signal, before SIGKILL.
const CMD_GRACE: Duration = Duration::from_secs(5);

/// What CMD's run shares with the rest of `gangctl start`: the cluster (for its pids),
/// the signals, the first signal that asked for a stop, and the reaping tick.
pub(super) struct Watch<'a> {
    pub cluster: &'a Cluster,
    pub signals: &'a mut StopSignals,
    pub stopped_by: &'a mut Option<Caught>,
    pub tick: &'a mut Interval,
}

/// Run CMD (`program` `rest`) against the cluster at `master` until it exits: its exit
/// code as a shell reports it, 127 if it cannot run.
pub(super) async fn run(program: &str, rest: &[String], master: &str, w: Watch<'_>) -> i32 {
    match command(program, rest, master).spawn() {
        Err(e) => {
            eprintln!("gangctl: cannot run {program}: {e}");
            127
        }
        Ok(child) => supervise(program, child, w).await,
    }
}

/// CMD as it is started: `GANG_MASTER` set, prun and gangctl first in its `PATH`, its
/// signal mask cleared, and a hangup when gangctl dies without a teardown.
fn command(program: &str, rest: &[String], master: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest).env("GANG_MASTER", master);
    // prun and gangctl (next to this executable) come first in the command's PATH.
    if let Some(path) = path_with_our_dir() {
        cmd.env("PATH", path);
    }
    let me = std::process::id();
    // SAFETY: runs in the forked child before exec and only makes async-signal-safe
    // system calls (pthread_sigmask, prctl, getppid); it allocates nothing.
    unsafe {
        // If gangctl dies without a teardown (SIGKILL), CMD hears of it as a hangup.
        // Spawned on the runtime's thread, which lives as long as gangctl.
        cmd.pre_exec(move || {
            signals::unblock_all()?;
            nix::sys::prctl::set_pdeathsig(Signal::SIGHUP)?;
            if nix::unistd::getppid().as_raw() as u32 != me {
                return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
            }
            Ok(())
        });
    }
    cmd
}

/// Wait for CMD to exit, passing signals on and reaping orphans meanwhile.
async fn supervise(program: &str, mut child: Child, w: Watch<'_>) -> i32 {
    let cmd_pid = child.id();
    let mut kill_at: Option<Instant> = None;
    loop {
        let grace_over = async {
            match kill_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break match status {
                Ok(s) => exit_code(s),
                Err(e) => { eprintln!("gangctl: waiting for {program}: {e}"); 1 }
            },
            c = w.signals.recv() => {
                if let Some(at) = on_signal(program, &mut child, c, w.stopped_by) {
                    kill_at = Some(at);
                }
            }
            _ = grace_over => {
                eprintln!(
                    "gangctl: {program} did not exit within {} s: killing it",
                    CMD_GRACE.as_secs()
                );
                let _ = child.start_kill();
                kill_at = None;
            }
            _ = w.tick.tick() => {
                let mut owned = w.cluster.pids();
                owned.extend(cmd_pid);
                strays::reap_exited(&owned);
            }
        }
    }
}

/// A signal while CMD runs: when CMD must be killed if it has not exited by then.
fn on_signal(
    program: &str,
    child: &mut Child,
    c: Caught,
    stopped_by: &mut Option<Caught>,
) -> Option<Instant> {
    if stopped_by.is_some() {
        // A second signal: no more patience.
        let _ = child.start_kill();
        return None;
    }
    if c.signal == Signal::SIGINT && c.from_terminal {
        // The terminal sent the Ctrl-C to CMD too; it decides (an interactive shell
        // stays, prun cancels its job and exits).
        return None;
    }
    eprintln!("gangctl: {}: stopping {program} and the cluster", c.signal);
    if !c.from_terminal
        && let Some(pid) = child.id()
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), c.signal);
    }
    *stopped_by = Some(c);
    Some(Instant::now() + CMD_GRACE)
}

/// `PATH` with the directory of this executable in front.
fn path_with_our_dir() -> Option<std::ffi::OsString> {
    let exe = std::env::current_exe().ok()?;
    let ours = exe.parent()?.to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(ours).chain(std::env::split_paths(&rest));
    std::env::join_paths(dirs).ok()
}

/// A child's exit status as a shell would report it: the code, or 128+signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}
