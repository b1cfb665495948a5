//! The guard: a small process beside the agent that outlives it just long enough to kill
//! its ranks' process groups.
//!
//! A rank's leader dies with the agent (`PR_SET_PDEATHSIG`), but what the rank started
//! (`cmd &` in a script) lives on in its process group, and the agent's own sweep of the
//! group after the leader exits never runs if the agent was killed. So the agent tells the
//! guard, over a pipe, each group it starts (`+PGID`) and each it has finished sweeping
//! (`-PGID`); when the pipe closes (the agent exited, however it died) the guard SIGKILLs
//! every group still listed, and exits. A listed id cannot have been reused: Linux does
//! not hand out a pid while a process group of that id still has a member.
//!
//! The guard runs in a process group of its own and ignores SIGINT, SIGTERM and SIGHUP (a
//! signal to the agent's process group must not end it before the agent), and it is the
//! agent's own binary in another mode (`gang-agent --guard-ranks`), so it needs nothing
//! installed beside it. Agents started in-process (tests) run without one.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

use nix::sys::signal::{SigHandler, Signal, killpg, signal};
use nix::unistd::Pid;
use tracing::warn;

/// The argument that makes the agent's binary a guard.
pub const GUARD_ARG: &str = "--guard-ranks";

pub struct Guard {
    pipe: Mutex<Option<ChildStdin>>,
    child: Mutex<Option<Child>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

impl Guard {
    /// Start a guard from the agent's own binary at `exe`.
    pub fn spawn(exe: &Path) -> std::io::Result<Guard> {
        // Its own process group: a SIGKILL to the agent's group (a launcher tearing the
        // agent down) must not take the guard with it.
        let mut child = Command::new(exe)
            .arg(GUARD_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Guard {
            pipe: Mutex::new(pipe),
            child: Mutex::new(Some(child)),
        })
    }

    fn say(&self, line: &str) {
        let mut pipe = self.pipe.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pipe.as_mut()
            && let Err(e) = p.write_all(line.as_bytes())
        {
            warn!("the rank guard is gone ({e}): a killed agent may leave rank processes behind");
            *pipe = None;
        }
    }

    /// A rank's process group exists: kill it if the agent dies.
    pub fn watch(&self, pgid: Pid) {
        self.say(&format!("+{}\n", pgid.as_raw()));
    }

    /// The group was swept after its leader exited: not ours any more.
    pub fn release(&self, pgid: Pid) {
        self.say(&format!("-{}\n", pgid.as_raw()));
    }

    /// At a clean shutdown, after every rank was killed and reaped: let the guard go.
    pub fn finish(&self) {
        self.pipe.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.wait();
        }
    }
}

/// The guard's life: read `+PGID` / `-PGID` lines until the pipe closes, then SIGKILL
/// every group still listed.
pub fn run() -> ! {
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: setting a signal to be ignored runs no handler code.
        unsafe {
            let _ = signal(s, SigHandler::SigIgn);
        }
    }
    let mut groups = BTreeSet::new();
    for line in BufReader::new(std::io::stdin()).lines() {
        let Ok(line) = line else { break };
        let (op, n) = line.split_at(line.len().min(1));
        match (op, n.parse::<i32>()) {
            ("+", Ok(p)) if p > 1 => {
                groups.insert(p);
            }
            ("-", Ok(p)) => {
                groups.remove(&p);
            }
            _ => {}
        }
    }
    for p in groups {
        let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
    }
    std::process::exit(0)
}
