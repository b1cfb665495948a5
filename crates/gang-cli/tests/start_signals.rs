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

#[test]
fn a_mesh_over_the_ceiling_is_refused_at_once() {
    let _serial = serial();
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--mesh", "100x100"],
            &[
                "gangctl: a 100x100 mesh needs 10000 agents, one process per node on this machine (",
                "; the limit is 64 (--max-agents, at most 1024). A local cluster is for demos and tests: use a smaller mesh, or emulated nodes for a fleet test (`gangctl start --emulate`).\n",
            ],
        ),
        (
            &["--mesh", "10x10"],
            &[
                "needs 100 agents",
                "the limit is 64",
                "--max-agents 100, at most 1024",
            ],
        ),
        (
            &["--mesh", "2x2", "--max-agents", "5000"],
            &["'--max-agents <N>'", "5000 is not from 1 to 1024"],
        ),
    ];
    for (args, words) in cases {
        let started = Instant::now();
        let mut g = Gangctl::spawn(args);
        let status = g.child.wait().unwrap();
        let took = started.elapsed();
        let err = g.final_stderr();
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: lacks {w:?}: {err}");
        }
        // "At once": no daemon was even looked for; nothing ran below gangctl.
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        assert_nothing_left(Duration::ZERO, "a refused mesh");
        g.assert_tmp_empty();
    }
    // The refusal comes before the binaries are looked for.
    let empty = tempfile::tempdir().unwrap();
    let mut g = Gangctl::spawn(&[
        "--mesh",
        "100x100",
        "--bin-dir",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(
        g.child.wait().unwrap().code(),
        Some(2),
        "{}",
        g.final_stderr()
    );
}

#[test]
fn sigint_right_after_spawn() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2"]);
    let (status, took) = g.signal_and_wait(Signal::SIGINT);
    report("right after spawn", Signal::SIGINT, took, status);
    // Before gangctl took the signals over (its first microseconds), SIGINT ends it the
    // default way; nothing had started then.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(130) || status.signal() == Some(Signal::SIGINT as i32),
        "{status}: {}",
        g.final_stderr()
    );
    assert_nothing_left(Duration::from_secs(2), "SIGINT right after spawn");
    g.assert_tmp_empty();
}

/// Whether `pid` blocks `signal` (gangctl does from its first instructions on, before it
/// starts anything).
fn blocks(pid: i32, signal: Signal) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

#[test]
fn sigint_as_the_master_starts() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2", "--", "sleep", "600"]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || blocks(pid, Signal::SIGINT)),
        "gangctl never took SIGINT over"
    );
    let (status, took) = g.signal_and_wait(Signal::SIGINT);
    report("the master starting", Signal::SIGINT, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("gangctl: SIGINT while starting the cluster: stopping it"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGINT as the master starts");
    g.assert_tmp_empty();
}

#[test]
fn sigterm_while_the_agents_of_a_4x4_start() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "4x4", "--", "sleep", "600"]);
    assert!(
        wait_for(STAGE_DEADLINE, || g.files_in_cluster_dir("agent-", ".log")
            > 0),
        "no agent started: {}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGTERM);
    report("agents of a 4x4 starting", Signal::SIGTERM, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: SIGTERM while starting the cluster: stopping it"),
        "{err}"
    );
    assert!(
        !err.contains("cluster up"),
        "the signal came too late: {err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGTERM while agents start");
    g.assert_tmp_empty();
}

/// Fake agents that never register keep gangctl waiting for the nodes (30 s at most); each
/// leaves a helper in its process group. SIGHUP ends the wait at once, helpers included.
#[test]
fn sighup_while_waiting_for_the_nodes() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let bins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        bin_dir().join("gang-master"),
        bins.path().join("gang-master"),
    )
    .unwrap();
    let agent = bins.path().join("gang-agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\nsleep 600 &\n: > \"started-$$\"\nexec sleep 600\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut g = Gangctl::spawn(&[
        "--mesh",
        "2x2",
        "--bin-dir",
        bins.path().to_str().unwrap(),
        "--",
        "sleep",
        "600",
    ]);
    assert!(
        wait_for(STAGE_DEADLINE, || g.files_in_cluster_dir("started-", "")
            == 4),
        "the fake agents did not start: {}",
        g.stderr()
    );
    let pid = g.pid();
    let sleeps = || {
        descendants_of(pid)
            .iter()
            .filter(|p| p.alive() && p.cmdline == "sleep 600")
            .count()
    };
    assert!(
        wait_for(STAGE_DEADLINE, || sleeps() == 8),
        "4 fake agents and their helpers: {}",
        sleeps()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGHUP);
    report("waiting for the nodes", Signal::SIGHUP, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(129), "{err}");
    assert!(!err.contains("cluster up"), "{err}");
    assert_nothing_left(Duration::from_secs(2), "SIGHUP while waiting for nodes");
    g.assert_tmp_empty();
}

/// The case: a job's ranks run under `gangctl start -- prun`.
fn stop_while_a_job_runs(signal: Signal, code: i32) {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&[
        "--mesh", "2x2", "--", "prun", "-n", "2x2", "--", "sleep", "600",
    ]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(signal);
    report("ranks running", signal, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(code), "{err}");
    assert!(
        err.contains(&format!("gangctl: {signal}: stopping prun and the cluster")),
        "{err}"
    );
    // prun got the signal and cancelled its job.
    assert!(err.contains("prun: cancelling job 1"), "{err}");
    assert_nothing_left(Duration::from_secs(2), "a signal while ranks run");
    g.assert_tmp_empty();
}

#[test]
fn sigint_while_a_job_runs() {
    stop_while_a_job_runs(Signal::SIGINT, 130);
}

#[test]
fn sigterm_while_a_job_runs() {
    stop_while_a_job_runs(Signal::SIGTERM, 143);
}

/// `nohup gangctl start ... &` survives the hangup and the Ctrl-C it was started
/// ignoring (and so does the prun it runs, which inherits that); SIGTERM still stops it.
#[test]
fn signals_ignored_at_start_stay_ignored() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn_ignoring(
        &[
            "--mesh", "2x2", "--", "prun", "-n", "2x2", "--", "sleep", "600",
        ],
        &[Signal::SIGHUP, Signal::SIGINT],
    );
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );
    let prun = descendants_of(pid)
        .into_iter()
        .find(|p| p.ppid == pid && p.cmdline.contains("prun"))
        .expect("prun runs under gangctl");
    // Discarded as they are sent: were either taken, the first would decide the status.
    for s in [Signal::SIGHUP, Signal::SIGINT] {
        kill(Pid::from_raw(prun.pid), s).unwrap();
        kill(Pid::from_raw(pid), s).unwrap();
    }
    let (status, _) = g.signal_and_wait(Signal::SIGTERM);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: SIGTERM: stopping prun and the cluster"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGTERM after ignored signals");
    g.assert_tmp_empty();
}

/// Nothing is left even when nobody tears down: an agent SIGKILLed takes its ranks with
/// it (PR_SET_PDEATHSIG in the agent), and gangctl SIGKILLed takes the daemons (they
/// were forked by a thread that asked for SIGTERM at its end), their ranks, and CMD
/// (SIGHUP) with it.
#[test]
fn sigkill_of_an_agent_or_of_gangctl_leaves_nothing() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2", "--", "sleep", "600"]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || g.master().is_some()),
        "the cluster did not come up: {}",
        g.stderr()
    );
    let o = Command::new(PRUN)
        .args(["-n", "2x2", "--detach", "--", "sleep", "600"])
        .env("GANG_MASTER", g.master().unwrap())
        .env("GANG_CONFIG", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );

    // An agent dies without stopping its rank: the rank dies with it.
    let ranks = ranks_below(pid);
    let rank = &ranks[0];
    kill(Pid::from_raw(rank.ppid), Signal::SIGKILL).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || !alive(rank.pid)),
        "rank {} outlived its agent {}",
        rank.pid,
        rank.ppid
    );

    // gangctl dies without a teardown: everything follows it.
    let sent = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let status = g.child.wait().unwrap();
    assert_nothing_left(EXIT_DEADLINE, "gangctl SIGKILLed");
    eprintln!(
        "gangctl SIGKILLed ({status}): everything below it gone in {:?}",
        sent.elapsed()
    );
}

/// A command that ignores SIGTERM is SIGKILLed at a second signal; its child, orphaned,
/// comes to gangctl (a child subreaper) and is killed at the end.
#[test]
fn a_stubborn_command_is_killed_and_its_orphans_swept() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    // `; :` keeps sh from exec'ing sleep: sleep stays sh's child.
    let mut g = Gangctl::spawn(&[
        "--mesh",
        "1x1",
        "--",
        "sh",
        "-c",
        "trap '' INT TERM; sleep 600; :",
    ]);
    let pid = g.pid();
    let sleeping = || {
        descendants_of(pid)
            .iter()
            .any(|p| p.alive() && p.cmdline == "sleep 600")
    };
    assert!(
        wait_for(STAGE_DEADLINE, sleeping),
        "the command did not start: {}",
        g.stderr()
    );
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    assert!(
        wait_for(STAGE_DEADLINE, || g
            .stderr()
            .contains("gangctl: SIGTERM: stopping sh and the cluster")),
        "{}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGTERM);
    report("a stubborn command, twice", Signal::SIGTERM, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: killed 1 leftover process(es)"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "a stubborn command");
    g.assert_tmp_empty();
}
