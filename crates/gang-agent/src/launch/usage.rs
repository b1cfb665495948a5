//! What a rank used, from cgroups made for it alone: CPU time (user and system) and the
//! memory high-water mark, read when it ends and reported with its exit (sacct's UserCPU,
//! SystemCPU and MaxRSS; the master sums CPU over the job's ranks and keeps the largest
//! high-water mark).
//!
//! cgroup v2 (`/sys/fs/cgroup` with the memory controller): one directory per rank,
//! `cpu.stat` (`user_usec`, `system_usec`) and `memory.peak` (Linux 5.19 and later).
//! cgroup v1: a directory in the cpuacct hierarchy (`cpuacct.usage_user`,
//! `cpuacct.usage_sys`, in ns) and one in the memory hierarchy
//! (`memory.max_usage_in_bytes`). Directories are `ROOT/gang-usage/agent-X-Y-PID/
//! job-J-rank-R`; the child enters them before exec (as it enters its freezer cgroup), so
//! everything the rank starts is counted. Where none can be made the rank runs without,
//! and its usage is reported unknown, never as 0.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::error::Coord;
use crate::ranks::RankKey;

/// How long removing an ended rank's directories may wait for leftovers to die.
const REMOVE_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    V1,
    V2,
}

/// What one rank used; `None`: not known (no such file on this kernel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub mem_peak_bytes: Option<u64>,
}

/// This agent's accounting directories: v2, one; v1, the cpuacct one and the memory one.
#[derive(Debug)]
pub struct UsageBase {
    kind: Kind,
    dirs: Vec<PathBuf>,
}

impl UsageBase {
    /// Find a hierarchy to account ranks in, or say (logged) why there is none.
    pub fn open(node: Coord) -> Option<UsageBase> {
        let v2 = Path::new("/sys/fs/cgroup");
        let v2_memory = fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
        let roots: Vec<PathBuf> = if v2_memory {
            vec![v2.to_path_buf()]
        } else {
            vec![v2.join("cpuacct"), v2.join("memory")]
        };
        let kind = if v2_memory { Kind::V2 } else { Kind::V1 };
        if kind == Kind::V1 && !roots.iter().all(|r| r.join("cgroup.procs").exists()) {
            info!(
                "no cgroup hierarchy for accounting (cgroup v2 with memory, or v1 cpuacct and memory): ranks' CPU time and memory are not measured"
            );
            return None;
        }
        match Self::open_at(kind, &roots, node) {
            Ok(b) => Some(b),
            Err(e) => {
                warn!(
                    "cannot make accounting cgroups: {e}; ranks' CPU time and memory are not measured"
                );
                None
            }
        }
    }

    fn open_at(kind: Kind, roots: &[PathBuf], node: Coord) -> io::Result<UsageBase> {
        static INSTANCES: AtomicU32 = AtomicU32::new(0);
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let mut name = format!("agent-{}-{}-{}", node.x, node.y, std::process::id());
        if n > 0 {
            name.push_str(&format!(".{n}"));
        }
        let mut dirs = Vec::new();
        for root in roots {
            let base = root.join("gang-usage");
            fs::create_dir_all(&base)?;
            if kind == Kind::V2 {
                // Ranks below get memory.peak only if the controller reaches them.
                enable_memory(root)?;
                enable_memory(&base)?;
            }
            clean_stale(&base);
            let dir = base.join(&name);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if kind == Kind::V2 {
                enable_memory(&dir)?;
            }
            dirs.push(dir);
        }
        info!(dirs = ?dirs, ?kind, "ranks' CPU time and memory are measured in cgroups");
        Ok(UsageBase { kind, dirs })
    }

    /// The directories of one rank, ready for its child to enter.
    pub fn create(&self, key: RankKey) -> io::Result<RankUsage> {
        let name = format!("job-{}-rank-{}", key.job_id, key.rank);
        let mut rank = RankUsage {
            kind: self.kind,
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        for base in &self.dirs {
            let dir = base.join(&name);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    rank.remove_now();
                    return Err(e);
                }
            }
            rank.dirs.push(dir.clone());
            match fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
            {
                Ok(f) => rank.procs.push(OwnedFd::from(f)),
                Err(e) => {
                    rank.remove_now();
                    return Err(e);
                }
            }
        }
        Ok(rank)
    }
}

impl Drop for UsageBase {
    fn drop(&mut self) {
        for dir in &self.dirs {
            remove_ranks(dir);
            let _ = fs::remove_dir(dir);
        }
    }
}

/// One rank's accounting cgroups.
#[derive(Debug)]
pub struct RankUsage {
    kind: Kind,
    dirs: Vec<PathBuf>,
    /// Their `cgroup.procs`, open until the child has entered.
    procs: Vec<OwnedFd>,
}

impl RankUsage {
    /// The descriptors the child writes "0" to before exec.
    pub fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// The child has been spawned: the parent no longer needs `cgroup.procs`.
    pub fn spawned(&mut self) {
        self.procs.clear();
    }

    /// What the rank used, all its processes told (read once it has ended).
    pub fn read(&self) -> Usage {
        let num = |p: PathBuf| -> Option<u64> { fs::read_to_string(p).ok()?.trim().parse().ok() };
        match self.kind {
            Kind::V2 => {
                let dir = &self.dirs[0];
                let stat = fs::read_to_string(dir.join("cpu.stat")).unwrap_or_default();
                let field = |k: &str| -> Option<u64> {
                    stat.lines()
                        .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
                        .map(|us| us * 1000)
                };
                Usage {
                    cpu_user_ns: field("user_usec "),
                    cpu_system_ns: field("system_usec "),
                    mem_peak_bytes: num(dir.join("memory.peak")),
                }
            }
            Kind::V1 => {
                let (cpu, mem) = (&self.dirs[0], &self.dirs[1]);
                Usage {
                    cpu_user_ns: num(cpu.join("cpuacct.usage_user")),
                    cpu_system_ns: num(cpu.join("cpuacct.usage_sys")),
                    mem_peak_bytes: num(mem.join("memory.max_usage_in_bytes")),
                }
            }
        }
    }

    /// Remove the directories, retrying while leftovers die (they were sent SIGKILL with
    /// the rank's group).
    pub async fn remove(self) {
        let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
        for dir in &self.dirs {
            loop {
                kill_members(dir);
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        warn!(dir = %dir.display(), "cannot remove a finished rank's accounting cgroup: {e}");
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        }
    }

    /// A launch that failed before its child ran: nothing is inside.
    pub fn remove_now(&self) {
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// In the forked child, before exec: move this process into each cgroup. Only the
/// async-signal-safe write(2); allocates nothing.
pub fn enter(procs_fds: &[RawFd]) -> io::Result<()> {
    for &fd in procs_fds {
        crate::switch::freezer::enter(fd)?;
    }
    Ok(())
}

fn enable_memory(dir: &Path) -> io::Result<()> {
    let control = dir.join("cgroup.subtree_control");
    let on =
        fs::read_to_string(&control).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
    if on {
        return Ok(());
    }
    fs::write(&control, "+memory")
}

fn kill_members(dir: &Path) {
    let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn remove_ranks(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            kill_members(&e.path());
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// Directories of agents that died (their pid is gone).
fn clean_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(crate::switch::freezer::dead_agents_dir)
        {
            continue;
        }
        remove_ranks(&entry.path());
        match fs::remove_dir(entry.path()) {
            Ok(()) => {
                debug!(dir = %entry.path().display(), "removed a dead agent's accounting directory")
            }
            Err(e) => {
                debug!(dir = %entry.path().display(), "a dead agent's accounting directory stays: {e}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real process in a rank's cgroups: what it burns and holds is what is read.
    #[test]
    fn a_ranks_cpu_and_memory_are_measured() {
        let base = UsageBase::open(Coord { x: 90, y: 91 })
            .expect("this host has cgroups for accounting (v2 with memory, or v1 cpuacct+memory)");
        let key = RankKey {
            job_id: 4242,
            rank: 0,
        };
        let mut rank = base.create(key).unwrap();
        let fds = rank.procs_fds();
        let mut cmd = std::process::Command::new("sh");
        // ~0.2 s of CPU in the shell, and 64 MiB held by sort (one line: it keeps it whole).
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; head -c 67108864 /dev/zero | sort >/dev/null",
        ]);
        // SAFETY: only write(2) in the child.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || enter(&fds));
        }
        let status = cmd.status().unwrap();
        assert!(status.success());
        rank.spawned();
        let used = rank.read();
        let user = used.cpu_user_ns.expect("user CPU time");
        assert!(user > 20_000_000, "{used:?}");
        assert!(used.cpu_system_ns.is_some(), "{used:?}");
        let peak = used.mem_peak_bytes.expect("a memory high-water mark");
        assert!(peak > 60 << 20, "{used:?}");
        let dirs = rank.dirs.clone();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(rank.remove());
        assert!(dirs.iter().all(|d| !d.exists()));
    }
}
