//! A master that takes connections and never answers: `prun` and `gangctl` say so within
//! their timeout (`--timeout`, `GANG_TIMEOUT`, 10 s by default) instead of hanging, and
//! `prun` stays killable meanwhile. The "master" is a plain listener that accepts and
//! reads nothing, as a hung master or a wrong port would.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const PRUN: &str = env!("CARGO_BIN_EXE_prun");
const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

/// A silent master on a Unix socket in `dir`; the count of connections it took.
fn silent_unix(dir: &Path) -> (PathBuf, Arc<AtomicUsize>) {
    let path = dir.join("master.sock");
    let l = UnixListener::bind(&path).unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    let t = taken.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
            t.fetch_add(1, Ordering::SeqCst);
        }
    });
    (path, taken)
}

fn command(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(bin);
    gang_local::with_default_signals(&mut c);
    c.args(args)
        .env_remove("GANG_MASTER")
        .env_remove("GANG_TIMEOUT")
        .env_remove("GANG_OUTPUT")
        .env("GANG_CONFIG", "/dev/null")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run to the end, failing the test if it takes longer than `within`.
fn run_within(mut c: Command, within: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = c.spawn().unwrap();
    let out = wait_within(child, within);
    (out, start.elapsed())
}

fn wait_within(child: Child, within: Duration) -> Output {
    let pid = Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if kill(pid, None).is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill(pid, Signal::SIGKILL).is_ok()
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        !watchdog.join().unwrap(),
        "still running after {within:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_command_reports_a_silent_master_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, _) = silent_unix(dir.path());
    let addr = format!("unix:{}", sock.display());
    let said = |prog: &str| {
        format!("{prog}: the master at {addr} did not answer within 1s (--timeout, GANG_TIMEOUT)\n")
    };
    let cases: [(&str, &[&str]); 7] = [
        (PRUN, &["-n", "1", "--", "true"]),
        (PRUN, &["-n", "1", "--detach", "--", "true"]),
        (GANGCTL, &["jobs"]),
        (GANGCTL, &["job", "1"]),
        (GANGCTL, &["cancel", "1"]),
        (GANGCTL, &["attach", "1"]),
        (GANGCTL, &["output", "1"]),
    ];
    // In parallel: each waits its second.
    let runs: Vec<_> = cases
        .iter()
        .map(|(bin, args)| {
            let mut a = vec!["--master", &addr, "--timeout", "1"];
            a.extend_from_slice(args);
            let c = command(bin, &a, &[]);
            std::thread::spawn(move || run_within(c, Duration::from_secs(30)))
        })
        .collect();
    for ((bin, args), run) in cases.iter().zip(runs) {
        let (o, took) = run.join().unwrap();
        let prog = if *bin == PRUN { "prun" } else { "gangctl" };
        assert_eq!(o.status.code(), Some(1), "{prog} {args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), said(prog), "{prog} {args:?}");
        assert!(
            took >= Duration::from_secs(1),
            "{prog} {args:?} took {took:?}"
        );
    }

    // From the environment, and the default when nothing is set.
    let c = command(
        GANGCTL,
        &["--master", &addr, "nodes"],
        &[("GANG_TIMEOUT", "1")],
    );
    let (o, _) = run_within(c, Duration::from_secs(30));
    assert_eq!(stderr(&o), said("gangctl"));
    let c = command(GANGCTL, &["--master", &addr, "stats"], &[]);
    let (o, took) = run_within(c, Duration::from_secs(60));
    assert_eq!(
        stderr(&o),
        format!(
            "gangctl: the master at {addr} did not answer within 10s (--timeout, GANG_TIMEOUT)\n"
        )
    );
    assert!(took >= Duration::from_secs(10), "{took:?}");
}

#[test]
fn a_silent_tls_master_times_out_in_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let o = command(
        GANGCTL,
        &["certs", "init", certs.to_str().unwrap(), "--mesh", "1x1"],
        &[],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    let addr = format!("https://127.0.0.1:{port}");
    let ca = certs.join("ca.pem");
    let c = command(
        GANGCTL,
        &["--master", &addr, "--timeout", "2", "jobs"],
        &[("GANG_CA", ca.to_str().unwrap())],
    );
    let (o, _) = run_within(c, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "gangctl: the master at {addr} did not answer within 2s (--timeout, GANG_TIMEOUT)\n"
        )
    );
}

#[test]
fn prun_stays_killable_while_the_master_is_silent() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, taken) = silent_unix(dir.path());
    let addr = format!("unix:{}", sock.display());
    let wait_connected = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while taken.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "prun never connected");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // No timeout at all: a signal says what it waits for, a second one leaves at once.
    let mut child = command(
        PRUN,
        &["--master", &addr, "--timeout", "0", "-n", "1", "--", "true"],
        &[],
    )
    .spawn()
    .unwrap();
    wait_connected(1);
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert_eq!(
        first,
        "prun: cancelling the job as soon as the master answers (again to leave now)\n"
    );
    kill(pid, Signal::SIGTERM).unwrap();
    let o = wait_within(child, Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(130));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert_eq!(
        rest,
        "prun: left before the master answered; if it made the job, `gangctl jobs` shows it\n"
    );

    // One SIGHUP, with a timeout: prun ends when the timeout does.
    let start = Instant::now();
    let child = command(
        PRUN,
        &["--master", &addr, "--timeout", "2", "-n", "1", "--", "true"],
        &[],
    )
    .spawn()
    .unwrap();
    wait_connected(2);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).unwrap();
    let o = wait_within(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).ends_with(&format!(
            "prun: the master at {addr} did not answer within 2s (--timeout, GANG_TIMEOUT)\n"
        )),
        "{}",
        stderr(&o)
    );
    assert!(start.elapsed() < Duration::from_secs(20));
}

/// prun started with SIGHUP ignored (`nohup prun ... &`) does not take a hangup: after a
/// SIGHUP and a SIGTERM it has seen one signal, not two, so it waits out its timeout
/// (exit 1) instead of leaving at once (130).
#[test]
fn a_hangup_prun_was_started_ignoring_stays_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, taken) = silent_unix(dir.path());
    let addr = format!("unix:{}", sock.display());
    let mut cmd = command(
        PRUN,
        &["--master", &addr, "--timeout", "2", "-n", "1", "--", "true"],
        &[],
    );
    // SAFETY: signal(2) in the child before exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while taken.load(Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline, "prun never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGHUP).unwrap();
    kill(pid, Signal::SIGTERM).unwrap();
    let o = wait_within(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with(
            "prun: cancelling the job as soon as the master answers (again to leave now)\n"
        ),
        "{}",
        stderr(&o)
    );
}
