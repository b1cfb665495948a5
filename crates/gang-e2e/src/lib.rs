//! Helpers for end-to-end tests: a local cluster of the real binaries, the commands run as
//! a user would, and waits on conditions with deadlines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use gang_local::{LocalCluster, LocalClusterOptions, default_bin_dir};
use gang_proto::v1;

pub mod etcd_cluster;
pub mod failover;
pub mod flood;
pub mod netns;
pub mod switch_in;

/// Whatever clients reach a master through: a local cluster, emulated hosts.
pub trait Master {
    /// `GANG_MASTER` for a client on this machine.
    fn master(&self) -> String;
}

impl Master for LocalCluster {
    fn master(&self) -> String {
        self.master_addr().to_string()
    }
}

/// A master's address alone (`GANG_MASTER`), for a client on a thread of its own.
#[derive(Debug, Clone)]
pub struct MasterAddr(pub String);

impl Master for MasterAddr {
    fn master(&self) -> String {
        self.0.clone()
    }
}

impl Master for gang_local::hosts::EmulatedHosts {
    fn master(&self) -> String {
        self.master_addr()
    }
}

/// The binaries a cluster needs; built on demand when a test runs alone
/// (`cargo test --workspace` has built them already).
pub fn bin_dir() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let dir = default_bin_dir().expect("test executable location");
    BUILT.call_once(|| {
        let all = ["gang-master", "gang-agent", "prun", "gangctl"];
        if all.iter().all(|b| dir.join(b).is_file()) {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "gang-master",
            "-p",
            "gang-agent",
            "-p",
            "gang-cli",
        ]);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("cargo runs");
        assert!(st.success(), "building the binaries failed");
    });
    dir
}

/// Release builds of the binaries, built or brought up to date now (cargo's own check),
/// for the tests of fleets too large for debug builds on a 2-core host (4,096 emulated
/// nodes: debug agents answer hops too slowly for the liveness a fleet that size gets).
pub fn release_bin_dir() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let dir = default_bin_dir().expect("test executable location");
    let dir = dir.parent().map_or(dir.clone(), |p| p.join("release"));
    BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "gang-master",
                "-p",
                "gang-agent",
            ])
            .args(["-p", "gang-cli"])
            .status()
            .expect("cargo runs");
        assert!(st.success(), "building the release binaries failed");
    });
    dir
}

/// An example program (of `gang-msg` or of this crate), built if missing.
pub fn example(name: &str) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let path = bin_dir().join("examples").join(name);
    BUILT.call_once(|| {
        if path.is_file() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "gang-msg", "-p", "gang-e2e", "--examples"]);
        if bin_dir().ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("cargo runs");
        assert!(st.success(), "building the examples failed");
    });
    assert!(path.is_file(), "no example {}", path.display());
    path
}

/// A cluster of `w x h` agents with the product's own timeouts.
pub fn cluster(w: u32, h: u32, extra_master: &[&str]) -> LocalCluster {
    LocalCluster::start((w, h), options(extra_master)).expect("local cluster starts")
}

/// The options of [`cluster`], for a test that needs more of them.
///
/// The master's defaults (node timeout 3 s, kill grace 2 s), with one difference: a
/// heartbeat every 100 ms instead of 500. The deadlock check and the messaging activity
/// ride on heartbeats (a deadlock is flagged at the second check after the last rank
/// blocked), so the tests that measure them finish in seconds; and five times the
/// heartbeats load the master and the agents more than the default does, which makes the
/// suite a harder test of node liveness on a loaded host, not an easier one.
pub fn options(extra_master: &[&str]) -> LocalClusterOptions {
    let mut master_args: Vec<String> = ["--heartbeat-ms", "100"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Space sharing unless a test asks for slices: the #3 tests count on queueing.
    if !extra_master.contains(&"--mpl") {
        master_args.extend(["--mpl".to_string(), "1".to_string()]);
    }
    master_args.extend(extra_master.iter().map(|s| s.to_string()));
    LocalClusterOptions {
        bin_dir: Some(bin_dir()),
        master_args,
        ..LocalClusterOptions::default()
    }
}

/// Run `prun ARGS` against `c`, with `stdin` fed to it.
pub fn prun(c: &impl Master, args: &[&str], stdin: Option<&[u8]>) -> Output {
    prun_env(c, args, stdin, &[])
}

/// [`prun`] with more environment (which prun hands to the job).
pub fn prun_env(
    c: &impl Master,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Output {
    run_prun(c, args, stdin, env, None, PRUN_DEADLINE)
}

/// [`prun`] started in `dir`, which becomes the job's working directory: a program
/// named as a user at a shell names it (`./a.out`) is found there.
pub fn prun_in(c: &impl Master, dir: &Path, args: &[&str]) -> Output {
    run_prun(c, args, None, &[], Some(dir), PRUN_DEADLINE)
}

/// [`prun`] for a job that runs longer than [`PRUN_DEADLINE`]: killed (and the test
/// failed) only past `deadline`.
pub fn prun_within(c: &impl Master, args: &[&str], deadline: Duration) -> Output {
    run_prun(c, args, None, &[], None, deadline)
}

/// [`prun_env`] with its own deadline.
pub fn prun_env_within(
    c: &impl Master,
    args: &[&str],
    env: &[(&str, &str)],
    deadline: Duration,
) -> Output {
    run_prun(c, args, None, env, None, deadline)
}

fn run_prun(
    c: &impl Master,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
    dir: Option<&Path>,
    deadline: Duration,
) -> Output {
    let mut cmd = Command::new(bin_dir().join("prun"));
    cmd.args(args)
        .env("GANG_MASTER", c.master())
        .envs(env.iter().copied());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("prun runs");
    if let Some(data) = stdin {
        use std::io::Write;
        let mut si = child.stdin.take().expect("piped");
        si.write_all(data).expect("stdin written");
    }
    // Never hang a test: kill prun (which cancels nothing; the cluster is torn down
    // anyway) and fail with what it printed.
    let (out, killed) = output_within(child, deadline);
    if killed {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let tail: String = stdout
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let jobs = Command::new(bin_dir().join("gangctl"))
            .args(["jobs", "--all"])
            .env("GANG_MASTER", c.master())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "prun {args:?} did not end within {deadline:?}; stderr: {}\nstdout (end): {tail}\njobs:\n{jobs}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// A child's output once it ends, or what it wrote until `deadline`, when it is killed
/// (then `true`): a test waits on no process for ever.
pub fn output_within(child: std::process::Child, deadline: Duration) -> (Output, bool) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + deadline;
        while Instant::now() < deadline {
            if nix::sys::signal::kill(pid, None).is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok()
    });
    let out = child.wait_with_output().expect("the child ends");
    (out, watchdog.join().unwrap_or(false))
}

/// The longest any prun in a test may take.
pub const PRUN_DEADLINE: Duration = Duration::from_secs(60);

/// `gangctl --output json ARGS`, parsed.
pub fn gangctl_json(c: &impl Master, args: &[&str]) -> Result<serde_json::Value> {
    let out = gangctl(c, &[&["--output", "json"], args].concat());
    if !out.status.success() {
        bail!(
            "gangctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("gangctl printed JSON")
}

pub fn gangctl(c: &impl Master, args: &[&str]) -> Output {
    Command::new(bin_dir().join("gangctl"))
        .args(args)
        .env("GANG_MASTER", c.master())
        .output()
        .expect("gangctl runs")
}

/// Poll `f` until it returns `Some`, or fail after `timeout` with `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A job as `gangctl job ID --output json` shows it.
pub fn job(c: &impl Master, id: u64) -> serde_json::Value {
    gangctl_json(c, &["job", &id.to_string()]).expect("gangctl job")
}

/// Wait until job `id` is in `state` ("running", "completed", ...).
pub fn wait_state(c: &impl Master, id: u64, state: &str, timeout: Duration) -> serde_json::Value {
    wait_for(timeout, &format!("job {id} to be {state}"), || {
        let j = job(c, id);
        (j["state"] == state).then_some(j)
    })
}

/// Submit with `prun --detach` and return the job id.
pub fn submit(c: &impl Master, shape: &str, cmd: &[&str]) -> u64 {
    let out = prun(c, &[&["-n", shape, "--detach", "--"], cmd].concat(), None);
    assert!(
        out.status.success(),
        "prun --detach failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("prun --detach prints the job id")
}

/// Whether process `pid` exists.
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// Pids written by ranks into `dir/pid.RANK`, once all `n` are there.
pub fn rank_pids(dir: &Path, n: usize, timeout: Duration) -> Vec<i32> {
    wait_for(timeout, &format!("{n} ranks to write their pids"), || {
        let pids: Vec<i32> = (0..n)
            .filter_map(|r| std::fs::read_to_string(dir.join(format!("pid.{r}"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        (pids.len() == n).then_some(pids)
    })
}

/// A gRPC client of the master's JobService (for what portals do).
pub async fn jobs_client(
    c: &LocalCluster,
) -> v1::job_service_client::JobServiceClient<gang_proto::client::MasterChannel> {
    v1::job_service_client::JobServiceClient::new(c.channel().await.expect("master reachable"))
}

/// Attach to a job through the API (no stdin) and collect all its output until it ends.
pub async fn attach_all(c: &LocalCluster, id: u64) -> (String, v1::JobInfo) {
    let mut client = jobs_client(c).await;
    let first = v1::AttachRequest {
        job_id: id,
        stdin: vec![],
        stdin_eof: true,
        no_follow: false,
    };
    let mut stream = client
        .attach(tokio_stream::once(first))
        .await
        .expect("attach accepted")
        .into_inner();
    let mut text = Vec::new();
    while let Some(msg) = stream.message().await.expect("attach stream") {
        match msg.event {
            Some(v1::attach_response::Event::Output(o)) => text.extend_from_slice(&o.data),
            Some(v1::attach_response::Event::Finished(info)) => {
                return (String::from_utf8_lossy(&text).into_owned(), info);
            }
            _ => {}
        }
    }
    panic!("attach stream of job {id} ended without the final state");
}

/// A plain HTTP/1.0 GET (for the metrics endpoint); the whole response as text.
pub use gang_local::http_get;

/// A counter or gauge of the master's metrics, summed over the series whose labels
/// contain every one of `labels`.
pub fn metric(c: &LocalCluster, name: &str, labels: &[&str]) -> f64 {
    http_get(c.metrics_addr(), "/metrics")
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A process's scheduler state letter and CPU time (user + system, clock ticks) from
/// `/proc/PID/stat`; `None` once it is gone.
pub fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((state, utime + stime))
}

/// Stopped by a signal or the tracer (`T`/`t`), or frozen by the cgroup freezer (which
/// shows as `D`).
pub fn is_stopped(state: char) -> bool {
    matches!(state, 'T' | 't' | 'D')
}

/// A SIGSTOP sent to `pid` that it has not acted on yet. A process waiting for a CPU
/// acts on a stop only once it gets one, which on a loaded host can take a while: it
/// shows as runnable all that time, yet it will run none of its own code until
/// continued. Whoever judges a switch by process states counts it stopped.
pub fn stop_pending(pid: i32) -> bool {
    const SIGSTOP_BIT: u64 = 1 << (libc::SIGSTOP - 1);
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("ShdPnd:")
                .or_else(|| l.strip_prefix("SigPnd:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|mask| mask & SIGSTOP_BIT != 0)
}

/// How many of `pids` are running: alive, not stopped, nor about to stop (a SIGSTOP
/// pending while they wait for a CPU, see [`stop_pending`]).
pub fn running(pids: &[i32]) -> usize {
    pids.iter()
        .filter(|&&p| proc_stat(p).is_some_and(|(st, _)| !is_stopped(st)) && !stop_pending(p))
        .count()
}

/// A shell loop that writes its pid to `DIR/pid.RANK` and then burns CPU forever.
pub fn busy_script(dir: &Path) -> String {
    format!(
        "echo $$ > {}/pid.$GANG_RANK; while :; do :; done",
        dir.display()
    )
}

/// Run the calling thread at real-time priority where permitted (root), so that samples
/// of CPU-bound processes are taken on time; says whether it took.
pub fn realtime_sampler() -> bool {
    let param = libc::sched_param { sched_priority: 20 };
    // SAFETY: plain syscall on the calling thread with a valid parameter.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Nanoseconds a process has spent on a CPU (`/proc/PID/schedstat`); `None` once gone.
pub fn cpu_ns(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A token for this process's user, from `gangctl token` on the cluster's socket (for
/// calls over the TLS port: gRPC-Web, browsers).
pub fn user_token(c: &LocalCluster) -> String {
    let o = Command::new(bin_dir().join("gangctl"))
        .arg("token")
        .env("GANG_MASTER", c.master_addr())
        .output()
        .expect("gangctl runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

/// A log line without its terminal colour codes (`ESC [ ... m`: the daemons colour their
/// logs even into a file).
pub fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
