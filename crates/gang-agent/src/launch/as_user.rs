//! The launch's file system lookups (working directory, program, what it links) made
//! with the submitting user's file system credentials, not the agent's: done as root,
//! their answers told any user what exists in directories they may not enter (a
//! `/root/nonexistent` working directory failed with "No such file", `/root` with
//! "Permission denied").
//!
//! Linux keeps file system ids and supplementary groups per thread; the raw system
//! calls change this thread's only (glibc's wrappers of setgroups would change every
//! thread of the agent). The guard puts the agent's back before the thread does anything
//! else: the lookups are synchronous and hold the thread until they end.

use std::io;

use super::plan::RunAs;

/// This thread's file system identity switched to a user's, until dropped.
struct FsIdentity {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: the list outlives the call.
    check(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) })
}

/// setfsuid and setfsgid return the previous id and report no error: the new one is read
/// back (-1 changes nothing) to see that it took.
fn set_fs_ids(uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: plain system calls on ids.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
        let now_gid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as libc::gid_t;
        let now_uid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as libc::uid_t;
        if (now_uid, now_gid) != (uid, gid) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    Ok(())
}

impl FsIdentity {
    fn assume(uid: u32, gid: u32, groups: &[u32]) -> io::Result<FsIdentity> {
        // SAFETY: getgroups with 0 asks for the count; then fills a list that long.
        let mine = unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut());
            let mut v = vec![0; n.max(0) as usize];
            let n = libc::getgroups(v.len() as libc::c_int, v.as_mut_ptr());
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            v.truncate(n as usize);
            v
        };
        let saved = FsIdentity {
            // SAFETY: plain system calls that only read ids.
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
            groups: mine,
        };
        set_groups(groups)?;
        // From here on, dropping `saved` restores whatever was changed.
        set_fs_ids(uid, gid)?;
        Ok(saved)
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        // Back to the agent's: if this failed the thread would keep a user's identity,
        // which must never serve another launch.
        if set_fs_ids(self.uid, self.gid).is_err() || set_groups(&self.groups).is_err() {
            panic!("cannot restore the agent's file system identity on this thread");
        }
    }
}

/// Run `f` with `run_as`'s file system identity (the agent's own for `RunAs::Agent`).
pub fn with_fs_identity<T>(run_as: &RunAs, f: impl FnOnce() -> T) -> io::Result<T> {
    match run_as {
        RunAs::Agent => Ok(f()),
        RunAs::User { uid, gid, groups } => {
            let _as_user = FsIdentity::assume(*uid, *gid, groups)?;
            Ok(f())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root (to take another identity); without it, says so and passes.
    #[test]
    fn lookups_see_what_the_user_sees_and_the_thread_gets_its_identity_back() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::write(private.join("there"), b"x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let nobody = RunAs::User {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        };
        let errno = |p: &std::path::Path| std::fs::metadata(p).err().and_then(|e| e.raw_os_error());
        let seen = with_fs_identity(&nobody, || {
            (
                errno(&private.join("there")),
                errno(&private.join("missing")),
            )
        })
        .unwrap();
        // As the user, both answer the same: the directory is closed to them.
        assert_eq!(seen, (Some(libc::EACCES), Some(libc::EACCES)));
        // The agent's identity is back on this thread.
        assert_eq!(errno(&private.join("there")), None);
        assert_eq!(errno(&private.join("missing")), Some(libc::ENOENT));
    }
}
