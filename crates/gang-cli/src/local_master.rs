//! The address of the local cluster `gangctl start` runs, in a per-user file, so that
//! `prun` and `gangctl` in another terminal find it with nothing set (as `flux start`
//! leaves a URI behind for `flux proxy`).
//!
//! The file is `$XDG_RUNTIME_DIR/gang/master` (per user, cleared at logout), else
//! `$XDG_STATE_HOME/gang/master`, else `~/.local/state/gang/master`; mode 0600 in a 0700
//! directory. It holds the address and the pid of the `gangctl start` that wrote it: a
//! file whose process is gone (gangctl was SIGKILLed) is ignored rather than trusted.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// Where the address is kept, or `None` if neither `XDG_RUNTIME_DIR`, `XDG_STATE_HOME` nor
/// `HOME` is set.
pub fn path() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = var("XDG_RUNTIME_DIR")
        .or_else(|| var("XDG_STATE_HOME"))
        .or_else(|| var("HOME").map(|h| h.join(".local/state")))?;
    Some(dir.join("gang/master"))
}

/// Record `addr` as the local cluster's; a second `gangctl start` replaces the first's.
pub fn write(addr: &str) -> std::io::Result<PathBuf> {
    let path = path().ok_or_else(|| {
        std::io::Error::other("none of XDG_RUNTIME_DIR, XDG_STATE_HOME or HOME is set")
    })?;
    let dir = path.parent().expect("a file under gang/");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // Written aside and renamed, so a reader never sees half an address.
    let tmp = dir.join(format!(".master.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    writeln!(f, "{addr}\npid={}", std::process::id())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The address a running `gangctl start` left, if any.
pub fn read() -> Option<String> {
    let text = std::fs::read_to_string(path()?).ok()?;
    let mut lines = text.lines();
    let addr = lines.next()?.trim().to_string();
    let pid: i32 = lines
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())?;
    // Signal 0: only whether the process exists (EPERM: it does, as another user's).
    let alive = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    };
    (alive && !addr.is_empty()).then_some(addr)
}

/// Remove the file if it still names `addr` (a later `gangctl start` may have replaced it).
pub fn remove_if(addr: &str) {
    let Some(path) = path() else {
        return;
    };
    let ours = std::fs::read_to_string(&path).is_ok_and(|t| {
        t.lines().next() == Some(addr)
            && t.lines()
                .any(|l| l.strip_prefix("pid=") == Some(&std::process::id().to_string()))
    });
    if ours {
        let _ = std::fs::remove_file(path);
    }
}
