//! `gangctl start` stopped by SIGINT, SIGTERM, SIGHUP (and SIGKILL) at every moment, and
//! its agent ceiling: the real gangctl, gang-master, gang-agent and prun.
//!
//! Leftovers are found by process tree, not by name: this test process is a child
//! subreaper, so every process started below it that loses its parent is reparented to
//! it, and walking the ppid links of /proc from our pid finds anything still alive.
//!
//! The cases that start daemons need `gang-master` and `gang-agent` built next to
//! `gangctl` (`cargo test --workspace` builds them; `cargo test -p gang-cli` alone does
//! not, and then they say so and pass without running).
//!
//! The cases run one at a time (one lock): the process tree is the whole test process's.

mod at_start;
mod while_running;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gang_local::proc_table::{ProcEntry as Proc, all_procs, descendants, descendants_of};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");
const PRUN: &str = env!("CARGO_BIN_EXE_prun");

/// How long gangctl may take to exit after a signal. Everything normally takes well
/// under a second; the margin is for a loaded 2-core machine.
const EXIT_DEADLINE: Duration = Duration::from_secs(5);
/// How long a stage (a cluster coming up, ranks starting) may take before a case fails.
const STAGE_DEADLINE: Duration = Duration::from_secs(30);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    static SUBREAPER: std::sync::Once = std::sync::Once::new();
    SUBREAPER.call_once(|| {
        nix::sys::prctl::set_child_subreaper(true).expect("become a child subreaper");
    });
    // A failed case must not fail the others: its own cleanup ran as it unwound.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin_dir() -> PathBuf {
    Path::new(GANGCTL).parent().unwrap().to_path_buf()
}

fn daemons_built() -> bool {
    let dir = bin_dir();
    let built = dir.join("gang-master").is_file() && dir.join("gang-agent").is_file();
    if !built {
        eprintln!(
            "skipped: gang-master / gang-agent are not built in {} (cargo build --workspace --bins)",
            dir.display()
        );
    }
    built
}

/// Reap our children that have exited (orphans reparented to us).
fn reap_zombies() {
    let me = std::process::id() as i32;
    for p in descendants() {
        if p.ppid == me && !p.alive() {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Kill and reap everything below us (cleanup, after a failure or as a case ends).
fn kill_everything_below() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = descendants();
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        for p in left.iter().filter(|p| p.alive()) {
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
        }
        reap_zombies();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Nothing below us may be alive: wait for that until `within`, reaping what exits (a
/// process SIGKILLed a moment ago is not gone at once). Fails listing what is left.
fn assert_nothing_left(within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        reap_zombies();
        let alive: Vec<Proc> = descendants().into_iter().filter(Proc::alive).collect();
        if alive.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let list: Vec<String> = alive
                .iter()
                .map(|p| format!("{} (parent {}): {}", p.pid, p.ppid, p.cmdline))
                .collect();
            kill_everything_below();
            panic!(
                "{what}: left running after {within:?}:\n{}",
                list.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait for `cond` until `within`; false if it never held.
fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running `gangctl start` with its own TMPDIR (where its cluster directory goes) and
/// its stderr collected as it comes.
struct Gangctl {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// Set at the end of stderr: when gangctl and everything that shared it are gone.
    eof: Arc<AtomicBool>,
    tmp: tempfile::TempDir,
    /// Its XDG_RUNTIME_DIR: the address file of each case stays out of the user's.
    _runtime: tempfile::TempDir,
}

impl Gangctl {
    fn spawn(args: &[&str]) -> Gangctl {
        Gangctl::spawn_ignoring(args, &[])
    }

    /// Started as a terminal's foreground command would be, but with `ignored` set to
    /// SIG_IGN (as `&` and `nohup` leave SIGINT and SIGHUP).
    fn spawn_ignoring(args: &[&str], ignored: &'static [Signal]) -> Gangctl {
        let tmp = tempfile::tempdir().unwrap();
        let runtime = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(GANGCTL);
        gang_local::with_default_signals(&mut cmd);
        // SAFETY: signal(2) in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                for s in ignored {
                    libc::signal(*s as libc::c_int, libc::SIG_IGN);
                }
                Ok(())
            });
        }
        let mut child = cmd
            .arg("start")
            .args(args)
            .env("TMPDIR", tmp.path())
            .env("XDG_RUNTIME_DIR", runtime.path())
            .env_remove("GANG_MASTER")
            .env_remove("GANG_OUTPUT")
            .env("GANG_CONFIG", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run gangctl");
        let stderr = Arc::new(Mutex::new(String::new()));
        let eof = Arc::new(AtomicBool::new(false));
        let mut pipe = child.stderr.take().unwrap();
        let (sink, done) = (stderr.clone(), eof.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            done.store(true, Ordering::SeqCst);
        });
        Gangctl {
            child,
            stderr,
            eof,
            tmp,
            _runtime: runtime,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// All of stderr, once gangctl has exited. A process still holding the pipe (a
    /// leftover: the tree checks report it) cuts the wait short.
    fn final_stderr(&self) -> String {
        wait_for(Duration::from_secs(2), || self.eof.load(Ordering::SeqCst));
        self.stderr()
    }

    /// The cluster's directory under our TMPDIR, once it exists.
    fn cluster_dir(&self) -> Option<PathBuf> {
        std::fs::read_dir(self.tmp.path())
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("gang-cluster-"))
            })
    }

    fn files_in_cluster_dir(&self, prefix: &str, suffix: &str) -> usize {
        let Some(dir) = self.cluster_dir() else {
            return 0;
        };
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with(prefix) && n.ends_with(suffix)
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// `export GANG_MASTER=...` from stderr, once the cluster is up.
    fn master(&self) -> Option<String> {
        self.stderr().lines().find_map(|l| {
            l.strip_prefix("export GANG_MASTER=")
                .map(|m| m.trim().to_string())
        })
    }

    /// Send `signal` and wait for gangctl to exit: its status and how long it took.
    fn signal_and_wait(&mut self, signal: Signal) -> (ExitStatus, Duration) {
        let sent = Instant::now();
        kill(Pid::from_raw(self.pid()), signal).unwrap();
        let mut status = None;
        let exited = wait_for(EXIT_DEADLINE, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        if !exited {
            let err = self.stderr();
            kill_everything_below();
            let _ = self.child.wait();
            panic!("gangctl did not exit within {EXIT_DEADLINE:?} of {signal}; stderr:\n{err}");
        }
        (status.unwrap(), sent.elapsed())
    }

    /// Its TMPDIR holds nothing: the cluster directory was removed.
    fn assert_tmp_empty(&self) {
        let left: Vec<PathBuf> = std::fs::read_dir(self.tmp.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        assert!(
            left.is_empty(),
            "left in TMPDIR: {left:?}; stderr:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Gangctl {
    fn drop(&mut self) {
        // On a failure: nothing may outlive the case (nor disturb the next one).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        kill_everything_below();
    }
}

/// The ranks of a job running `sleep 600` (children of the agents, by the tree).
fn ranks_below(gangctl: i32) -> Vec<Proc> {
    let below = descendants_of(gangctl);
    below
        .iter()
        .filter(|p| p.alive() && p.cmdline == "sleep 600")
        .filter(|p| {
            below
                .iter()
                .any(|a| a.pid == p.ppid && a.cmdline.contains("gang-agent"))
        })
        .cloned()
        .collect()
}

fn alive(pid: i32) -> bool {
    all_procs().iter().any(|p| p.pid == pid && p.alive())
}

fn report(case: &str, signal: Signal, took: Duration, status: ExitStatus) {
    eprintln!("{case}: {signal} -> {status} in {took:?}");
}
