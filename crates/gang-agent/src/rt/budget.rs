//! A real-time budget for the agent's cgroup, where the kernel schedules real-time
//! threads by cgroup (`CONFIG_RT_GROUP_SCHED`, cgroup v1 `cpu.rt_runtime_us`): there a
//! cgroup with no budget refuses SCHED_FIFO to its threads, and systemd starts every
//! service in one (`system.slice` and the service's own cgroup get 0). Without it the
//! switch thread runs at normal priority and, with busy ranks beside it, wakes
//! milliseconds late at slot boundaries.
//!
//! Each level from the hierarchy's root down to the agent's cgroup that has no budget
//! gets up to [`BUDGET_US`] of every period, no more than its parent has (halved until
//! the kernel takes it, as siblings share their parent's). Ranks share the agent's cgroup
//! but not its priority (`SCHED_RESET_ON_FORK`), and an unprivileged rank cannot ask for
//! SCHED_FIFO.

use std::path::{Path, PathBuf};

/// Real-time microseconds per period asked for the agent's cgroup: its switch and session
/// threads wake, signal and sleep again.
pub const BUDGET_US: u64 = 50_000;

/// The cgroup v1 `cpu` hierarchy's mount and the agent's path in it, if RT group
/// scheduling is there.
fn cpu_cgroup() -> Option<(PathBuf, String)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        ctrls
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    })?;
    let root = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("cpu.rt_runtime_us").exists())?;
    Some((root, path))
}

fn budget(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("cpu.rt_runtime_us"))
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()
        .map(|v| if v < 0 { u64::MAX } else { v as u64 })
}

/// Give the agent's cgroup and its ancestors a budget where they have none. Returns the
/// cgroups changed (and their budgets), or why it could not.
pub fn grant() -> Result<Vec<(PathBuf, u64)>, String> {
    let (root, path) = cpu_cgroup().ok_or("no cgroup v1 cpu.rt_runtime_us here")?;
    let mut changed = Vec::new();
    let mut dir = root.clone();
    let mut parent = budget(&root).ok_or("cannot read the root's cpu.rt_runtime_us")?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir = dir.join(part);
        let now = budget(&dir).ok_or_else(|| format!("cannot read {}", dir.display()))?;
        if now > 0 {
            parent = now;
            continue;
        }
        let mut ask = BUDGET_US.min(parent);
        loop {
            if ask < 1_000 {
                return Err(format!(
                    "{} takes no real-time budget (its parent has {parent} us)",
                    dir.display()
                ));
            }
            match std::fs::write(dir.join("cpu.rt_runtime_us"), ask.to_string()) {
                Ok(()) => break,
                // Its siblings hold the rest of the parent's budget.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => ask /= 2,
                Err(e) => return Err(format!("{}: {e}", dir.join("cpu.rt_runtime_us").display())),
            }
        }
        changed.push((dir.clone(), ask));
        parent = ask;
    }
    Ok(changed)
}
