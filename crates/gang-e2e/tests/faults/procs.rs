//! The process tree below this test process: what a dead agent leaves behind.

use super::*;

pub(crate) use gang_local::proc_table::{ProcEntry as Proc, descendants};

/// Reap orphans that were reparented to us and have exited; a cluster's own children
/// (`theirs`: `LocalCluster::pids`) are its to reap.
pub(crate) fn reap_orphans(theirs: &[u32]) {
    let me = std::process::id() as i32;
    for p in descendants() {
        if p.ppid == me && !p.alive() && !theirs.contains(&(p.pid as u32)) {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Live processes below us of job `id` of the cluster marked `mark`: ranks get
/// `GANG_JOB_ID` from their agent and the job's environment, and pass both on to what
/// they start.
pub(crate) fn job_procs(mark: &str, id: u64) -> Vec<Proc> {
    let want_mark = format!("FAULTS_MARK={mark}");
    let want_id = format!("GANG_JOB_ID={id}");
    descendants()
        .into_iter()
        .filter(Proc::alive)
        .filter(|p| {
            let env = p.env();
            env.contains(&want_mark) && env.contains(&want_id)
        })
        .collect()
}

// ---------------------------------------------------------------- time sharing
