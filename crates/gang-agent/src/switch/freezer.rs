//! The cgroup freezer, for FREEZE ranks: each rank in its own cgroup
//! `BASE/agent-X-Y-PID/job-J-rank-R` (`agent-X-Y-PID.N` for the Nth further agent in one
//! process, as in tests), created before the spawn; the child moves itself in
//! (writes "0" to `cgroup.procs`, through a descriptor opened before the fork) before it
//! execs, so no process of the rank ever runs outside it. The agent keeps the state file
//! open (`freezer.state` on cgroup v1, `cgroup.freeze` on v2) and writes FROZEN/THAWED
//! (1/0) to it. When the rank ends its cgroup is thawed, emptied and removed.
//!
//! `freezer = "auto"` looks for a writable hierarchy: v1 at `/sys/fs/cgroup/freezer`, then
//! v2 at `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`. Directories left by agents that
//! died (their PID is gone) are thawed and removed at start.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracing::{debug, info, warn};

use crate::error::Coord;
use crate::ranks::RankKey;

/// How long removing an ended rank's cgroup may wait for its last processes to die.
const REMOVE_WAIT: Duration = Duration::from_secs(2);

/// The `freezer` setting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FreezerSetting {
    /// Find a writable freezer hierarchy; none: FREEZE jobs use signals.
    #[default]
    Auto,
    /// Never use the freezer.
    Off,
    /// This directory (created if missing) inside a cgroup hierarchy.
    Path(PathBuf),
}

impl std::str::FromStr for FreezerSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(FreezerSetting::Auto),
            "off" => Ok(FreezerSetting::Off),
            p if p.starts_with('/') => Ok(FreezerSetting::Path(PathBuf::from(p))),
            other => Err(format!(
                "freezer {other:?}: expected auto, off or an absolute path"
            )),
        }
    }
}

impl<'de> serde::Deserialize<'de> for FreezerSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// As it is written: `auto`, `off` or the path (what `from_str` reads back).
impl serde::Serialize for FreezerSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FreezerSetting::Auto => s.serialize_str("auto"),
            FreezerSetting::Off => s.serialize_str("off"),
            FreezerSetting::Path(p) => p.serialize(s),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// cgroup v1 freezer controller: `freezer.state` FROZEN / THAWED.
    V1,
    /// cgroup v2: `cgroup.freeze` 1 / 0.
    V2,
}

impl Kind {
    fn state_file(self) -> &'static str {
        match self {
            Kind::V1 => "freezer.state",
            Kind::V2 => "cgroup.freeze",
        }
    }
    pub fn frozen(self) -> &'static [u8] {
        match self {
            Kind::V1 => b"FROZEN",
            Kind::V2 => b"1",
        }
    }
    pub fn thawed(self) -> &'static [u8] {
        match self {
            Kind::V1 => b"THAWED",
            Kind::V2 => b"0",
        }
    }
}

/// This agent's directory in a freezer hierarchy.
#[derive(Debug)]
pub struct FreezerBase {
    pub dir: PathBuf,
    pub kind: Kind,
}

const AUTO_CANDIDATES: [(&str, &str); 3] = [
    // (hierarchy root that must exist, our base directory)
    (
        "/sys/fs/cgroup/freezer/cgroup.procs",
        "/sys/fs/cgroup/freezer/gang",
    ),
    ("/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/gang"),
    (
        "/sys/fs/cgroup/unified/cgroup.controllers",
        "/sys/fs/cgroup/unified/gang",
    ),
];

impl FreezerBase {
    /// Set up this agent's freezer directory, or say why there is none (logged).
    pub fn open(setting: &FreezerSetting, node: Coord) -> Option<FreezerBase> {
        match setting {
            FreezerSetting::Off => {
                info!("freezer off: FREEZE jobs are switched with SIGSTOP/SIGCONT");
                None
            }
            FreezerSetting::Path(base) => match Self::open_at(base, node) {
                Ok(f) => Some(f),
                Err(e) => {
                    warn!(base = %base.display(), "no usable freezer: {e}; FREEZE jobs are switched with SIGSTOP/SIGCONT");
                    None
                }
            },
            FreezerSetting::Auto => {
                let mut why = Vec::new();
                for (root, base) in AUTO_CANDIDATES {
                    if !Path::new(root).exists() {
                        continue;
                    }
                    match Self::open_at(Path::new(base), node) {
                        Ok(f) => return Some(f),
                        Err(e) => why.push(format!("{base}: {e}")),
                    }
                }
                if why.is_empty() {
                    why.push("no cgroup freezer hierarchy mounted".into());
                }
                // Not a problem until a FREEZE job comes (then each launch warns).
                info!(
                    "no usable freezer ({}); FREEZE jobs are switched with SIGSTOP/SIGCONT",
                    why.join("; ")
                );
                None
            }
        }
    }

    /// `base/agent-X-Y-PID`, created; the hierarchy's kind read from what the kernel
    /// puts in it.
    pub fn open_at(base: &Path, node: Coord) -> io::Result<FreezerBase> {
        fs::create_dir_all(base)?;
        clean_stale(base);
        // One directory per agent instance (tests run several agents in one process).
        static INSTANCES: AtomicU32 = AtomicU32::new(0);
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let mut name = format!("agent-{}-{}-{}", node.x, node.y, std::process::id());
        if n > 0 {
            name.push_str(&format!(".{n}"));
        }
        let dir = base.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let kind = if dir.join("freezer.state").exists() {
            Kind::V1
        } else if dir.join("cgroup.freeze").exists() {
            Kind::V2
        } else {
            let _ = fs::remove_dir(&dir);
            return Err(io::Error::other(
                "not a freezer cgroup (no freezer.state nor cgroup.freeze)",
            ));
        };
        info!(dir = %dir.display(), ?kind, "freezer available for FREEZE jobs");
        Ok(FreezerBase { dir, kind })
    }

    /// A cgroup for one rank, ready for its child to enter.
    pub fn create(&self, key: RankKey) -> io::Result<RankCgroup> {
        let dir = self
            .dir
            .join(format!("job-{}-rank-{}", key.job_id, key.rank));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // Left over from an earlier incarnation of the rank (never reused normally).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let open = |name: &str| -> io::Result<OwnedFd> {
            let f = fs::OpenOptions::new().write(true).open(dir.join(name))?;
            Ok(OwnedFd::from(f))
        };
        let result = (|| {
            let state = open(self.kind.state_file())?;
            let procs = open("cgroup.procs")?;
            Ok((state, procs))
        })();
        match result {
            Ok((state, procs)) => Ok(RankCgroup {
                dir,
                kind: self.kind,
                state,
                procs: Some(procs),
            }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// Remove this agent's directory (at shutdown, after every rank is gone), with the
    /// rank cgroups still in it (their removal may not have finished).
    pub async fn remove(&self) {
        let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
        loop {
            remove_ranks(&self.dir, self.kind);
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    warn!(dir = %self.dir.display(), "cannot remove the agent's freezer directory: {e}");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

/// One rank's freezer cgroup.
#[derive(Debug)]
pub struct RankCgroup {
    pub dir: PathBuf,
    pub kind: Kind,
    /// The state file, open for the switch thread.
    state: OwnedFd,
    /// `cgroup.procs`, open until the child has entered (its pre_exec writes "0").
    procs: Option<OwnedFd>,
}

impl RankCgroup {
    /// The descriptor the child writes "0" to before exec (see `enter`).
    pub fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// The child has been spawned: the parent no longer needs `cgroup.procs`.
    pub fn spawned(&mut self) {
        self.procs = None;
    }

    /// Write FROZEN (or THAWED). Allocation-free; returns the errno on failure.
    pub fn set_frozen(&self, frozen: bool) -> Result<(), i32> {
        let text = if frozen {
            self.kind.frozen()
        } else {
            self.kind.thawed()
        };
        // SAFETY: a valid descriptor we own and a valid buffer.
        let n =
            unsafe { libc::pwrite(self.state.as_raw_fd(), text.as_ptr().cast(), text.len(), 0) };
        if n < 0 {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(())
        }
    }

    /// What to remove once the rank has ended.
    pub fn cleanup(&self) -> Cleanup {
        Cleanup {
            dir: self.dir.clone(),
            kind: self.kind,
        }
    }
}

/// In the forked child, before exec: move this process into the cgroup. Only the
/// async-signal-safe write(2); allocates nothing.
pub fn enter(procs_fd: RawFd) -> io::Result<()> {
    // SAFETY: writing a static byte to a descriptor inherited from the parent.
    let n = unsafe { libc::write(procs_fd, b"0".as_ptr().cast(), 1) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An ended rank's cgroup, to thaw, empty and remove.
#[derive(Debug, Clone)]
pub struct Cleanup {
    pub dir: PathBuf,
    pub kind: Kind,
}

impl Cleanup {
    /// Thaw, SIGKILL whatever is still inside (processes that left the rank's process
    /// group), and remove the directory, retrying while they die.
    pub async fn run(self) {
        let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
        loop {
            match self.try_remove() {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    warn!(dir = %self.dir.display(), "cannot remove a finished rank's freezer cgroup: {e}");
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// One attempt (synchronous).
    pub fn try_remove(&self) -> io::Result<()> {
        let _ = fs::write(self.dir.join(self.kind.state_file()), self.kind.thawed());
        kill_members(&self.dir);
        match fs::remove_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn kill_members(dir: &Path) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// One attempt at removing every rank cgroup in an agent directory.
fn remove_ranks(dir: &Path, kind: Kind) {
    if let Ok(ranks) = fs::read_dir(dir) {
        for rank in ranks.flatten() {
            if rank.path().is_dir() {
                let _ = Cleanup {
                    dir: rank.path(),
                    kind,
                }
                .try_remove();
            }
        }
    }
}

/// Whether `name` is an agent's directory (`agent-X-Y-PID[.N]`) whose process is gone
/// (here and in the accounting hierarchy, `launch/usage.rs`).
pub fn dead_agents_dir(name: &str) -> bool {
    let pid = name
        .strip_prefix("agent-")
        .and_then(|rest| rest.rsplit('-').next())
        .and_then(|p| p.split('.').next())
        .and_then(|p| p.parse::<u32>().ok());
    pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Thaw and remove the directories of agents that are no longer running (SIGKILLed:
/// their ranks, killed by pdeathsig, could not die while frozen).
fn clean_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !dead_agents_dir(name) {
            continue;
        }
        let dir = entry.path();
        let kind = if dir.join("freezer.state").exists() {
            Kind::V1
        } else {
            Kind::V2
        };
        remove_ranks(&dir, kind);
        match fs::remove_dir(&dir) {
            Ok(()) => info!(dir = %dir.display(), "removed the freezer directory of a dead agent"),
            Err(e) => debug!(dir = %dir.display(), "stale freezer directory not removed yet: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_parses() {
        assert_eq!("auto".parse(), Ok(FreezerSetting::Auto));
        assert_eq!("off".parse(), Ok(FreezerSetting::Off));
        assert_eq!(
            "/sys/fs/cgroup/freezer/x".parse(),
            Ok(FreezerSetting::Path("/sys/fs/cgroup/freezer/x".into()))
        );
        assert!("relative".parse::<FreezerSetting>().is_err());
    }

    #[test]
    fn a_plain_directory_is_not_a_freezer() {
        let dir = tempfile::tempdir().unwrap();
        let err = FreezerBase::open_at(dir.path(), Coord { x: 0, y: 0 }).unwrap_err();
        assert!(err.to_string().contains("not a freezer"), "{err}");
        // And it cleaned up after itself.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
