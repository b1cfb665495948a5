//! The process tree below this test process: what a dead agent leaves behind.

use super::*;

/// A process below this one, from /proc.
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pub(crate) state: char,
    pub(crate) cmdline: String,
}

impl Proc {
    fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    fn env(&self) -> Vec<String> {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .map(|b| {
                b.split(|&c| c == 0)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub(crate) fn all_procs() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        Some(Proc {
            pid,
            ppid,
            state,
            cmdline,
        })
    })
    .collect()
}

/// Every process below this one, by ppid links.
pub(crate) fn descendants() -> Vec<Proc> {
    let all = all_procs();
    let mut found: Vec<Proc> = Vec::new();
    let mut frontier = vec![std::process::id() as i32];
    while let Some(parent) = frontier.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                frontier.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

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
