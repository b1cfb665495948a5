//! Orphans under `gangctl start`: with [`become_subreaper`], a process that loses its
//! parent anywhere below gangctl (a rank's child whose agent was killed, a daemon a
//! command left running) is adopted by gangctl rather than by init, so gangctl can reap
//! it while it runs and stop it at the end: nothing started under gangctl outlives it.
//!
//! Only pids that are gangctl's children are ever signalled or waited for, and a child's
//! pid cannot be reused before it is reaped, so no unrelated process can be hit.

use std::io;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::proc_table::all_procs;

/// Make this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// This process's children, from /proc (gang-local's one reader): (pid, state letter).
fn children() -> Vec<(i32, char)> {
    let me = std::process::id() as i32;
    all_procs()
        .into_iter()
        .filter(|p| p.ppid == me)
        .map(|p| (p.pid, p.state))
        .collect()
}

/// Reap children that have exited, other than `owned` (pids that someone else in this
/// process waits for: the cluster's daemons, the command).
pub fn reap_exited(owned: &[u32]) {
    for (pid, state) in children() {
        if state == 'Z' && !owned.contains(&(pid as u32)) {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// SIGKILL and reap every child left, and the children they leave in turn, until none is
/// left or `within` has passed. Call it when every child this process waits for itself
/// has been reaped. Returns how many were still running.
pub fn stop_all(within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut killed: Vec<i32> = Vec::new();
    loop {
        let left = children();
        if left.is_empty() || Instant::now() >= deadline {
            return killed.len();
        }
        for (pid, state) in left {
            if state != 'Z' && !killed.contains(&pid) {
                killed.push(pid);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
