//! Real throwaway Unix users and groups (`useradd`, removed with `userdel -r` when the
//! guard drops, also when a test fails), commands run as them, and connections to the
//! master's socket made with their credentials.

use std::ffi::CString;
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::unistd::{Gid, Group, User};
use tonic::transport::{Channel, Endpoint};

/// useradd and friends lock /etc/passwd and /etc/group; tests of this binary run in
/// parallel, so they take turns here rather than fail on each other's lock.
static ACCOUNTS_LOCK: Mutex<()> = Mutex::new(());

/// A user as the tests use it: what the master should see, and where they may write.
#[derive(Debug, Clone)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group, the primary one included (`getgrouplist`, as the master looks it up).
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

#[derive(Debug, Clone)]
pub struct TestGroup {
    pub name: String,
    pub gid: u32,
}

/// Users and groups made for one test; all removed on drop. Declare it before the
/// cluster, so that the cluster (and the ranks running as these users) goes first.
pub struct Accounts {
    prefix: String,
    users: Vec<String>,
    groups: Vec<String>,
}

/// Run an account tool, retrying while another process (another test binary) holds the
/// password file lock.
fn admin(tool: &str, args: &[&str]) -> Output {
    let _turn = ACCOUNTS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut tries = 0;
    loop {
        let out = Command::new(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool} runs: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        tries += 1;
        if out.status.success() || !stderr.contains("lock") || tries == 20 {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Accounts {
    /// Names are `gt<pid><tag>`: unique per test process, short enough for useradd (32).
    pub fn new() -> Accounts {
        Accounts {
            prefix: format!("gt{}", std::process::id()),
            users: Vec::new(),
            groups: Vec::new(),
        }
    }

    pub fn group(&mut self, tag: &str) -> TestGroup {
        let name = format!("{}{tag}", self.prefix);
        let out = admin("groupadd", &[&name]);
        assert!(
            out.status.success(),
            "groupadd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.groups.push(name.clone());
        let g = Group::from_name(&name)
            .expect("group lookup")
            .expect("the group just made");
        TestGroup {
            name,
            gid: g.gid.as_raw(),
        }
    }

    /// A user with a home directory and a group of their own, and also in `extra`.
    pub fn user(&mut self, tag: &str, extra: &[&TestGroup]) -> TestUser {
        self.make_user(tag, extra, None)
    }

    /// A user given `uid` (one freed by [`delete_user`](Self::delete_user)), as an
    /// administrator reusing a uid would make them.
    pub fn user_with_uid(&mut self, tag: &str, uid: u32) -> TestUser {
        self.make_user(tag, &[], Some(uid))
    }

    fn make_user(&mut self, tag: &str, extra: &[&TestGroup], uid: Option<u32>) -> TestUser {
        let name = format!("{}{tag}", self.prefix);
        let extra: Vec<&str> = extra.iter().map(|g| g.name.as_str()).collect();
        let mut args = vec!["--create-home", "--user-group", "--shell", "/bin/sh"];
        let list = extra.join(",");
        if !extra.is_empty() {
            args.extend(["--groups", &list]);
        }
        let uid = uid.map(|u| u.to_string());
        if let Some(u) = &uid {
            args.extend(["--uid", u]);
        }
        args.push(&name);
        let out = admin("useradd", &args);
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.users.push(name.clone());
        let u = User::from_name(&name)
            .expect("user lookup")
            .expect("the user just made");
        let cname = CString::new(name.as_str()).expect("no NUL in a user name");
        let groups = nix::unistd::getgrouplist(&cname, u.gid)
            .expect("getgrouplist")
            .into_iter()
            .map(Gid::as_raw)
            .collect();
        TestUser {
            name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups,
            home: u.dir,
        }
    }
}

impl Accounts {
    /// Take `u` out of `g` (`gpasswd -d`), as an administrator would.
    pub fn remove_from_group(&self, u: &TestUser, g: &TestGroup) {
        let out = admin("gpasswd", &["-d", &u.name, &g.name]);
        assert!(
            out.status.success(),
            "gpasswd -d {} {}: {}",
            u.name,
            g.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Delete `u` now (`userdel --remove`), as an administrator would.
    pub fn delete_user(&mut self, u: &TestUser) {
        let out = admin("userdel", &["--remove", &u.name]);
        assert!(
            out.status.success(),
            "userdel {}: {}",
            u.name,
            String::from_utf8_lossy(&out.stderr)
        );
        self.users.retain(|n| *n != u.name);
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in self.users.iter().rev() {
            // --force: even if a process of theirs were still around, the account goes.
            let out = admin("userdel", &["--remove", "--force", u]);
            if !out.status.success() {
                eprintln!(
                    "userdel {u}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        for g in self.groups.iter().rev() {
            let out = admin("groupdel", &[g]);
            if !out.status.success() {
                eprintln!(
                    "groupdel {g}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
    }
}

/// `bin` run as `u`: their uid, primary group and every supplementary group (std's
/// `CommandExt::uid` drops them all, and `groups` is unstable), a clean environment and
/// their home as the working directory, like a login.
pub fn command_as(bin: &Path, u: &TestUser) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &u.home)
        .env("USER", &u.name)
        .env("LOGNAME", &u.name)
        .current_dir(&u.home);
    let (uid, gid, groups) = (u.uid, u.gid, u.groups.clone());
    // SAFETY: runs in the forked child before exec and only makes system calls; the group
    // list was allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Run `cmd` to the end, killing it (and failing) if it takes longer than `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    output_within_stdin(cmd, Stdio::null(), limit)
}

/// As [`output_within`], with `stdin` (a file, say) as the command's standard input.
pub fn output_within_stdin(cmd: &mut Command, stdin: Stdio, limit: Duration) -> Output {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, ended) = std::sync::mpsc::channel::<()>();
    // Until the child is reaped its pid cannot be anybody else's, so a kill at the
    // deadline hits it or nothing.
    let watchdog = std::thread::spawn(move || {
        ended.recv_timeout(limit).is_err()
            && nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok()
    });
    let out = child.wait_with_output().expect("wait for the command");
    let _ = done.send(());
    let killed = watchdog.join().unwrap_or(false);
    assert!(
        !killed,
        "{cmd:?} did not end within {limit:?}; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run `f` with `u`'s credentials, on a thread of its own that ends with them.
pub fn on_thread_as<T: Send + 'static>(
    u: &TestUser,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let (uid, gid, groups) = (u.uid, u.gid, u.groups.clone());
    std::thread::spawn(move || {
        // The raw system calls change the credentials of this thread only (glibc's
        // wrappers would change every thread of the test).
        let ok = |r: libc::c_long| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls with a valid list.
        unsafe {
            ok(libc::syscall(
                libc::SYS_setgroups,
                groups.len(),
                groups.as_ptr(),
            ))?;
            ok(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            ok(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
        }
        f()
    })
    .join()
    .expect("the thread does not panic")
}

/// A connection to the master's socket made with `u`'s credentials: the kernel records
/// the connecting thread's, and reports them to the master (SO_PEERCRED).
fn connect_as(path: &Path, u: &TestUser) -> io::Result<UnixStream> {
    let path = path.to_path_buf();
    on_thread_as(u, move || UnixStream::connect(&path))
}

/// A gRPC channel to the master's socket as `u` (what their prun or portal would get).
pub async fn channel_as(socket: &Path, u: &TestUser) -> Channel {
    let (socket, u) = (socket.to_path_buf(), u.clone());
    Endpoint::from_static("http://master.sock")
        .connect_with_connector(tower::service_fn(move |_| {
            let (socket, u) = (socket.clone(), u.clone());
            async move {
                let s = tokio::task::spawn_blocking(move || connect_as(&socket, &u))
                    .await
                    .map_err(io::Error::other)??;
                s.set_nonblocking(true)?;
                let s = tokio::net::UnixStream::from_std(s)?;
                Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .expect("the master's socket is reachable")
}
