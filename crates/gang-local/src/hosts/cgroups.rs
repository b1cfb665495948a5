//! A cgroup subtree of its own for each emulated host, in every hierarchy this machine
//! mounts (the hybrid layout: cgroup v1 controllers, systemd's named hierarchy, and the
//! unified v2 one). The host's first process is moved into its subtree before it
//! unshares its cgroup namespace, so the systemd inside sees that subtree as its root
//! and makes `init.scope`, `system.slice`, ... there, not beside another host's (or the
//! machine's own).
//!
//! Subtrees are named `gang-host-PID-H-N` (PID: the harness's process, H: the harness
//! in that process, N: the host), so a start
//! removes those a dead harness left behind: cgroups that are empty of processes only
//! (rmdir refuses any other).

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";
const PREFIX: &str = "gang-host-";

/// The hierarchies mounted under /sys/fs/cgroup (directories that hold `cgroup.procs`).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    if root.join("cgroup.procs").exists() {
        // A pure cgroup v2 machine: one hierarchy.
        return vec![root.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("cgroup.procs").exists())
                // Symlinks (cpu -> cpu,cpuacct) would name a hierarchy twice.
                .filter(|p| !p.is_symlink())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// One host's subtrees.
#[derive(Debug)]
pub struct HostCgroups {
    dirs: Vec<PathBuf>,
}

impl HostCgroups {
    /// Make the subtrees of host `index` of harness `harness` (unique in this process:
    /// two harnesses of one process, such as two tests, must not share a subtree).
    pub fn create(harness: u32, index: u32) -> std::io::Result<HostCgroups> {
        let name = format!("{PREFIX}{}-{harness}-{index}", std::process::id());
        let mut dirs = Vec::new();
        for h in hierarchies() {
            let dir = h.join(&name);
            match std::fs::create_dir(&dir) {
                // A v1 cpuset starts with no CPUs and no memory nodes, and takes no
                // process until given some: its parent's.
                Ok(()) => {
                    inherit_cpuset(&h, &dir);
                    real_time_budget(&dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    let made = HostCgroups { dirs };
                    let _ = made.remove();
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot make cgroup {}: {e}", dir.display()),
                    ));
                }
            }
            dirs.push(dir);
        }
        Ok(HostCgroups { dirs })
    }

    /// The shell lines that move the shell running them into every subtree.
    pub fn enter_script(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > {}/cgroup.procs\n", d.display()))
            .collect()
    }

    /// Processes still in the subtrees (none once the host is down).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for d in &self.dirs {
            walk(d, &mut |dir| {
                if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                    pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
                }
            });
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Remove the subtrees, deepest first; what still holds a process stays (and is
    /// named in the error).
    pub fn remove(&self) -> Result<(), String> {
        let mut left = Vec::new();
        for d in &self.dirs {
            if let Err(e) = remove_tree(d) {
                left.push(e);
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(left.join("; "))
        }
    }
}

/// Real-time microseconds per period each host gets where the kernel schedules real-time
/// threads by cgroup (`cpu.rt_runtime_us`): what a host's root has to hand down to its
/// services. 19 hosts fit in the machine's 950 ms of every second.
const HOST_RT_US: u64 = 50_000;

fn real_time_budget(dir: &Path) {
    let f = dir.join("cpu.rt_runtime_us");
    if f.exists() {
        let _ = std::fs::write(f, HOST_RT_US.to_string());
    }
}

fn inherit_cpuset(parent: &Path, dir: &Path) {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        if let Ok(v) = std::fs::read_to_string(parent.join(f)) {
            let _ = std::fs::write(dir.join(f), v.trim());
        }
    }
    // And so does every cgroup the host's systemd makes below (a service whose process
    // cannot join its cpuset fails with status 219/CGROUP).
    if dir.join("cpuset.cpus").exists() {
        let _ = std::fs::write(dir.join("cgroup.clone_children"), "1");
    }
}

/// With real-time group scheduling (v1 `cpu.rt_runtime_us`), a new cgroup gets no
/// real-time time at all: SCHED_FIFO is refused (EPERM) to every process in it, and so
/// to the agents' switch and session threads, which on a real host run SCHED_FIFO in
/// the root cgroup (systemd leaves services there in the cpu hierarchy). Give each host
/// a share: 2% of a CPU, far more than those threads use, and 47 hosts' worth of the
/// kernel's default 95%. If the machine has none left to give, the host runs without
/// (its agents log that they run at normal priority).
/// Every directory under `dir`, children before their parent.
fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), f);
            }
        }
    }
    f(dir);
}

fn remove_tree(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    let mut err = None;
    walk(dir, &mut |d| {
        if let Err(e) = std::fs::remove_dir(d)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            err.get_or_insert_with(|| format!("cannot remove cgroup {}: {e}", d.display()));
        }
    });
    err.map_or(Ok(()), Err)
}

/// Remove the subtrees harnesses that are gone left behind.
pub fn remove_stale() {
    for h in hierarchies() {
        let Ok(entries) = std::fs::read_dir(&h) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(PREFIX) else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = remove_tree(&e.path());
            }
        }
    }
}
