//! Output with backpressure, end to end: a rank's stdout reaches `prun` (and `gangctl
//! output`) byte for byte whatever its rate and however slow the reader; a master that
//! stops taking output for a while is waited out through the agent's spool; and what
//! passes the spool's bound is reported lost, by rank and stream, with a non-zero exit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::LocalCluster;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long one relay may take on a loaded 2-core host (100 MB through prun takes a few
/// seconds alone).
const RELAY_DEADLINE: Duration = Duration::from_secs(240);
const READ: usize = 64 * 1024;

/// `len` bytes of a deterministic pseudo-random stream (no two 64 KiB pieces alike, so a
/// piece relayed twice or out of order changes the hash).
fn blob(dir: &Path, len: usize) -> PathBuf {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = Vec::with_capacity(len);
    while data.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(len);
    let path = dir.join("blob");
    std::fs::write(&path, &data).unwrap();
    path
}

/// FNV-1a, 64 bits: enough to tell two 100 MB streams apart in a test.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Run `prun ARGS` reading its stdout `READ` bytes at a time, calling `after_read` with the
/// bytes read so far after each read (to sleep, or to stop the master). Returns what was
/// read, prun's status and its stderr.
fn prun_read(
    c: &LocalCluster,
    args: &[&str],
    mut after_read: impl FnMut(usize),
) -> (Vec<u8>, ExitStatus, String) {
    let mut child = Command::new(bin_dir().join("prun"))
        .args(args)
        .env("GANG_MASTER", c.master_addr())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prun runs");
    let pid = Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + RELAY_DEADLINE;
        while Instant::now() < deadline {
            if kill(pid, None).is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        kill(pid, Signal::SIGKILL).is_ok()
    });
    let mut err = child.stderr.take().expect("piped");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = child.stdout.take().expect("piped");
    let mut got = Vec::new();
    let mut buf = vec![0u8; READ];
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                after_read(got.len());
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading prun's stdout: {e}"),
        }
    }
    let status = child.wait().expect("prun ends");
    let killed = watchdog.join().unwrap_or(false);
    let err = err.join().unwrap_or_default();
    assert!(
        !killed,
        "prun {args:?} did not end within {RELAY_DEADLINE:?}; stderr: {err}"
    );
    (got, status, err)
}

fn same_bytes(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    assert_eq!(fnv(got), fnv(want), "{what}: hash of the bytes");
}

/// 100 MB from one rank into a reader that sleeps 0.5 ms after every 64 KiB: every byte
/// arrives in order, and `gangctl output` gives the same bytes afterwards. (Before the
/// outbox had a window, the agent dropped the oldest output past 8 MiB: 22 of 100 MB
/// arrived, with exit code 0.)
#[test]
fn a_hundred_megabytes_reach_a_slow_reader_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = blob(dir.path(), 100_000_000);
    let want = std::fs::read(&path).unwrap();
    let c = cluster(1, 1, &[]);
    let (got, status, err) = prun_read(
        &c,
        &["-n", "1x1", "--", "cat", path.to_str().unwrap()],
        |_| std::thread::sleep(Duration::from_micros(500)),
    );
    assert!(status.success(), "prun: {status}; {err}");
    assert!(!err.contains("lost"), "{err}");
    same_bytes("prun's stdout", &got, &want);
    let out = gangctl(&c, &["output", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    same_bytes("gangctl output", &out.stdout, &want);
    c.shutdown().unwrap();
}

/// A cluster whose node timeout outlasts a stopped master (the subject here is output,
/// not liveness: with the default 3 s, the agent's fence would rightly stop the job).
fn patient_cluster(agent_args: &[&str]) -> LocalCluster {
    let mut opts = options(&["--node-timeout-ms", "20000"]);
    opts.agent_args = agent_args.iter().map(|s| s.to_string()).collect();
    LocalCluster::start((1, 1), opts).expect("local cluster starts")
}

/// Run `cat BLOB` as a rank that starts writing only once `go` exists, and have the
/// master stopped (SIGSTOP) when it does: the rank writes everything while the master
/// takes nothing. The master is continued after `pause`. Returns what prun relayed.
fn relay_with_master_stopped(
    c: &mut LocalCluster,
    blob: &Path,
    pause: Duration,
) -> (Vec<u8>, ExitStatus, String) {
    let go = blob.with_file_name("go");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; exec cat {blob}",
        go = go.display(),
        blob = blob.display()
    );
    let master = Pid::from_raw(c.master_pid().expect("the master runs") as i32);
    let c = &*c;
    {
        std::thread::scope(|s| {
            let stopper = s.spawn(|| {
                // Submitted by the prun below: unknown until then.
                wait_for(Duration::from_secs(60), "job 1 running", || {
                    let j = gangctl_json(c, &["job", "1"]).ok()?;
                    (j["state"] == "running").then_some(())
                });
                kill(master, Signal::SIGSTOP).expect("stop the master");
                std::fs::write(&go, b"").unwrap();
                std::thread::sleep(pause);
                kill(master, Signal::SIGCONT).expect("continue the master");
            });
            let relayed = prun_read(c, &["-n", "1x1", "--", "sh", "-c", &script], |_| {});
            stopper.join().expect("the stopper thread");
            relayed
        })
    }
}

/// The master stopped for 5 s while a rank writes 60 MB: the rank keeps writing (its
/// output goes to the node's spool once the master has not answered for 2 s), and every byte
/// reaches prun, in order, once the master is back.
#[test]
fn output_survives_a_master_stopped_for_five_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let path = blob(dir.path(), 60_000_000);
    let want = std::fs::read(&path).unwrap();
    let mut c = patient_cluster(&[]);
    let (got, status, err) = relay_with_master_stopped(&mut c, &path, Duration::from_secs(5));
    assert!(status.success(), "prun: {status}; {err}");
    same_bytes("prun's stdout", &got, &want);
    let log = std::fs::read_to_string(c.agent_log(0, 0)).unwrap();
    assert!(
        log.contains("spooling the job's output"),
        "the agent never spooled: the master's stop did not hold the output up\n{log}"
    );
    let j = job(&c, 1);
    assert!(j.get("output_lost").is_none(), "{j}");
    c.shutdown().unwrap();
}

/// With a 1 MiB spool and the master stopped for 4 s, most of 30 MB cannot be kept: prun
/// relays what came, says how many bytes of rank 0's stdout were lost, and exits 1 though
/// the rank exited 0; `gangctl job` shows the same count.
#[test]
fn output_past_the_spool_bound_is_reported_lost() {
    let dir = tempfile::tempdir().unwrap();
    let len = 30_000_000;
    let path = blob(dir.path(), len);
    let mut c = patient_cluster(&["--output-spool-mb", "1"]);
    let (got, status, err) = relay_with_master_stopped(&mut c, &path, Duration::from_secs(4));
    assert_eq!(status.code(), Some(1), "prun: {status}; {err}");
    assert!(got.len() < len, "nothing was lost?");
    let lost = len - got.len();
    assert!(
        err.contains(&format!(
            "job 1: output lost: {lost} bytes of rank 0's stdout"
        )),
        "{err}"
    );
    let j = job(&c, 1);
    assert_eq!(j["state"], "completed", "{j}");
    assert_eq!(j["output_lost"][0]["rank"], 0, "{j}");
    assert_eq!(j["output_lost"][0]["stream"], "stdout", "{j}");
    assert_eq!(j["output_lost"][0]["bytes"], lost as u64, "{j}");
    c.shutdown().unwrap();
}
