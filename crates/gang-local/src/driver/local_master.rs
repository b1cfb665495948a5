//! The addresses of the local clusters `gangctl start` runs, one record per cluster, so
//! that `prun` and `gangctl` in another terminal find the newest with nothing set (as
//! `flux start` leaves a URI behind for `flux proxy`), and two clusters of one user do not
//! take each other's place: stopping one leaves the others reachable.
//!
//! The records are `$XDG_RUNTIME_DIR/gang/clusters/PID` (per user, cleared at logout), else
//! under `$XDG_STATE_HOME`, else `~/.local/state`; mode 0600 in a 0700 directory, named for
//! the `gangctl start` that wrote it. Each holds the address, that pid, and when it started:
//! the newest whose process is alive is the default; one whose process is gone (gangctl was
//! SIGKILLed) is ignored, and removed by the next reader.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The directory of the records, or `None` if neither `XDG_RUNTIME_DIR`, `XDG_STATE_HOME`
/// nor `HOME` is set.
pub fn dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("XDG_RUNTIME_DIR")
        .or_else(|| var("XDG_STATE_HOME"))
        .or_else(|| var("HOME").map(|h| h.join(".local/state")))?;
    Some(base.join("gang/clusters"))
}

/// One running local cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub addr: String,
    /// The `gangctl start` that runs it.
    pub pid: i32,
    /// When it was recorded, in nanoseconds since the epoch: the newest is the default.
    pub started_ns: u128,
    /// Its state and logs, and its mesh, for the note that names the cluster a command
    /// reached (`None` in a record of an older gangctl).
    pub dir: Option<PathBuf>,
    pub mesh: Option<(u32, u32)>,
}

/// Record `addr` as this process's local cluster (its files in `dir`, its `mesh`), beside
/// the others.
pub fn write(addr: &str, dir_of: &Path, mesh: (u32, u32)) -> std::io::Result<PathBuf> {
    let dir = dir().ok_or_else(|| {
        std::io::Error::other("none of XDG_RUNTIME_DIR, XDG_STATE_HOME or HOME is set")
    })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let pid = std::process::id();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Written aside and renamed, so a reader never sees half a record.
    let tmp = dir.join(format!(".{pid}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    writeln!(f, "{addr}\npid={pid}\nstarted_ns={started}")?;
    writeln!(f, "dir={}\nmesh={}x{}", dir_of.display(), mesh.0, mesh.1)?;
    f.sync_all()?;
    let path = dir.join(pid.to_string());
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

fn parse(text: &str) -> Option<Record> {
    let mut lines = text.lines();
    let addr = lines.next()?.trim().to_string();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .map(str::to_string)
    };
    let pid = field("pid=")?.parse().ok()?;
    let started_ns = field("started_ns=")?.parse().ok()?;
    let mesh = field("mesh=").and_then(|m| {
        let (w, h) = m.split_once('x')?;
        Some((w.parse().ok()?, h.parse().ok()?))
    });
    (!addr.is_empty()).then_some(Record {
        addr,
        pid,
        started_ns,
        dir: field("dir=").map(PathBuf::from),
        mesh,
    })
}

fn alive(pid: i32) -> bool {
    // Signal 0: only whether the process exists (EPERM: it does, as another user's).
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    }
}

/// The running local clusters, newest first. Records of processes that are gone are
/// removed (a `gangctl start` killed with SIGKILL leaves its record behind).
pub fn list() -> Vec<Record> {
    let Some(dir) = dir() else {
        return Vec::new();
    };
    list_in(&dir)
}

fn list_in(dir: &Path) -> Vec<Record> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut live = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        // Only records named for a pid; a half-written `.PID.tmp` is not one yet.
        let Ok(named) = name.parse::<i32>() else {
            continue;
        };
        let Some(r) = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|t| parse(&t))
        else {
            continue;
        };
        if r.pid == named && alive(r.pid) {
            live.push(r);
        } else if !alive(named) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    live.sort_by(|a, b| b.started_ns.cmp(&a.started_ns).then(b.pid.cmp(&a.pid)));
    live
}

/// The address of the newest running local cluster, if any.
pub fn read() -> Option<String> {
    list().into_iter().next().map(|r| r.addr)
}

/// The newest running local cluster, and how many run (the others are reached by naming
/// them): for the command that takes the newest by default to say which it took.
pub fn newest() -> Option<(Record, usize)> {
    let all = list();
    let running = all.len();
    all.into_iter().next().map(|r| (r, running))
}

/// Remove this process's record if it still names `addr`; the other clusters' stay.
pub fn remove_if(addr: &str) {
    let Some(dir) = dir() else {
        return;
    };
    let path = dir.join(std::process::id().to_string());
    let ours = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| parse(&t))
        .is_some_and(|r| r.addr == addr && r.pid == std::process::id() as i32);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, name: &str, addr: &str, pid: i32, started_ns: u128) {
        std::fs::write(
            dir.join(name),
            format!("{addr}\npid={pid}\nstarted_ns={started_ns}\n"),
        )
        .unwrap();
    }

    fn dead_pid() -> i32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        pid
    }

    #[test]
    fn the_newest_live_cluster_comes_first_and_dead_ones_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        let parent = nix::unistd::getppid().as_raw();
        let dead = dead_pid();
        put(dir.path(), &me.to_string(), "unix:/a", me, 10);
        put(dir.path(), &parent.to_string(), "unix:/b", parent, 20);
        put(dir.path(), &dead.to_string(), "unix:/dead", dead, 30);
        // Not a record: a half-written one, and one whose name and pid disagree.
        put(dir.path(), ".7.tmp", "unix:/tmp", me, 40);
        put(dir.path(), "1", "unix:/liar", me, 50);
        let got: Vec<String> = list_in(dir.path()).into_iter().map(|r| r.addr).collect();
        assert_eq!(got, ["unix:/b", "unix:/a"]);
        assert!(
            !dir.path().join(dead.to_string()).exists(),
            "dead record swept"
        );
        assert!(dir.path().join(me.to_string()).exists());
    }

    #[test]
    fn records_that_are_not_whole_are_ignored() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("unix:/a\npid=3\n"), None);
        assert_eq!(parse("\npid=3\nstarted_ns=1\n"), None);
        assert_eq!(
            parse("unix:/a\npid=3\nstarted_ns=1\n"),
            Some(Record {
                addr: "unix:/a".into(),
                pid: 3,
                started_ns: 1,
                dir: None,
                mesh: None,
            })
        );
        assert_eq!(
            parse("unix:/a\npid=3\nstarted_ns=1\ndir=/tmp/c\nmesh=4x2\n"),
            Some(Record {
                addr: "unix:/a".into(),
                pid: 3,
                started_ns: 1,
                dir: Some("/tmp/c".into()),
                mesh: Some((4, 2)),
            })
        );
    }
}
