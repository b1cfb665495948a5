//! A whole gang cluster on loopback: one `gang-master` and W*H `gang-agent` processes, for
//! `gangctl start`, end-to-end tests and benchmarks.
//!
//! ```no_run
//! use gang_local::{LocalCluster, LocalClusterOptions};
//! let cluster = LocalCluster::start((2, 2), LocalClusterOptions::default())?;
//! println!("GANG_MASTER={}", cluster.master_addr());
//! cluster.shutdown()?;
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! Invariants:
//! - Ports are ephemeral: the master and every agent listen on `127.0.0.1:0` and report
//!   what they got in ready files, so clusters never collide (a restarted master takes the
//!   ports of its first start back, so agents and clients find it again). Only the
//!   master's agent port may be put on another address
//!   ([`LocalClusterOptions::agents_listen`]).
//! - State and logs live in one directory: a fresh temporary one (removed at teardown
//!   unless [`LocalClusterOptions::keep`]), or [`LocalClusterOptions::dir`] (never removed).
//! - A mesh needs one agent process per node, all on this machine: a mesh of more than
//!   [`LocalClusterOptions::max_agents`] nodes (default [`DEFAULT_MAX_AGENTS`], at most
//!   [`MAX_AGENTS_BOUND`]) is refused before anything starts ([`CeilingError`]).
//! - Every process it started is stopped and reaped: by [`LocalCluster::shutdown`], by a
//!   failed or interrupted [`LocalCluster::start`], or, best-effort, on drop (so a
//!   panicking test leaves nothing behind). Signals go to each process's whole group.
//! - If the owner dies without tearing down (even by SIGKILL), the daemons get SIGTERM:
//!   they are forked by a thread that lives as long as the cluster and ask for
//!   `PR_SET_PDEATHSIG` (see `procs.rs`).
//! - [`LocalClusterOptions::interrupt`] aborts a pending start within about 25 ms of being
//!   set, whatever it is waiting for, with an [`Interrupted`] error after the teardown.
//!
//! Binaries: `gang-master` and `gang-agent` are looked up in
//! [`LocalClusterOptions::bin_dir`], else next to the current executable, else (for test
//! executables in `target/*/deps/`) in its parent directory. Cargo builds a workspace
//! binary for the integration tests of its own crate only, so a test in another crate must
//! make sure they are built in the same target directory (`cargo build -p gang-master -p
//! gang-agent` first, or set `bin_dir`).
//!
//! Every process runs in its own process group (a Ctrl-C at the terminal reaches the
//! command, not the cluster) and logs to `DIR/master.log` and `DIR/agent-X-Y.log`.
//!
//! [`start`](LocalCluster::start) and the other methods are blocking; they are safe to
//! call from inside a tokio runtime too (the gRPC polling runs on a thread of its own).

mod ceiling;
mod procs;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use gang_auth::PeerName;
use gang_auth::pki::Pki;
use gang_proto::client::{self, Target};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::{ListNodesRequest, NodeInfo, NodeState};
use nix::sys::signal::Signal;

pub use ceiling::{CeilingError, DEFAULT_MAX_AGENTS, MAX_AGENTS_BOUND, check_mesh, cores};
use procs::{Proc, Spawner};

pub const MASTER_BIN: &str = "gang-master";
pub const AGENT_BIN: &str = "gang-agent";
/// Lines of a log quoted in errors.
const TAIL_LINES: usize = 20;
const POLL: Duration = Duration::from_millis(25);

/// How to start a [`LocalCluster`].
#[derive(Debug, Clone)]
pub struct LocalClusterOptions {
    /// Slices (multiprogramming level); `None`: the master's default.
    pub mpl: Option<u32>,
    /// Working directory (state, ready files, logs). Created if missing and never removed.
    /// `None`: a fresh temporary directory, removed at shutdown unless `keep`.
    pub dir: Option<PathBuf>,
    /// Keep the temporary directory at shutdown.
    pub keep: bool,
    /// The master's database (`--state`; its output logs go beside it). `None`:
    /// `DIR/state.db`. Never removed at shutdown, e.g. for a database on a file system of
    /// its own.
    pub state: Option<PathBuf>,
    /// Where `gang-master` and `gang-agent` are; `None`: next to the current executable.
    pub bin_dir: Option<PathBuf>,
    /// Extra flags for `gang-master` (e.g. `["--heartbeat-ms", "100"]`).
    pub master_args: Vec<String>,
    /// Extra flags for every `gang-agent`.
    pub agent_args: Vec<String>,
    /// Extra environment for every process (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// How long the master may take to write its ready file.
    pub master_ready_timeout: Duration,
    /// How long until every node must be up.
    pub nodes_up_timeout: Duration,
    /// SIGTERM-to-SIGKILL grace at shutdown.
    pub shutdown_grace: Duration,
    /// Set to `true` (from another thread, e.g. on Ctrl-C) to make a pending
    /// [`LocalCluster::start`] give up within about 25 ms, tear down what it started, and
    /// fail with [`Interrupted`].
    pub interrupt: Option<Arc<AtomicBool>>,
    /// The most agents (nodes) the mesh may have: every node is a process on this
    /// machine. Default [`DEFAULT_MAX_AGENTS`]; at most [`MAX_AGENTS_BOUND`].
    pub max_agents: usize,
    /// Let jobs run as root (the master's `--allow-root-jobs` and the agents'
    /// `--allow-root`). Default: whether this process is root, so a root user's local
    /// cluster runs their jobs; a real cluster refuses them unless configured.
    pub allow_root_jobs: bool,
    /// Where the master's Unix socket goes; `None`: `DIR/master.sock`. The directory is
    /// private (0700: state, keys), so a cluster other local users must reach puts its
    /// socket in a directory they can traverse, as a real master does (`/run/gang`).
    pub socket: Option<PathBuf>,
    /// The address the master's agent port binds; `None`: 127.0.0.1. `0.0.0.0` lets an
    /// agent from outside this host's loopback (another network namespace) register; the
    /// cluster's own agents still dial 127.0.0.1.
    pub agents_listen: Option<IpAddr>,
}

impl Default for LocalClusterOptions {
    fn default() -> Self {
        LocalClusterOptions {
            mpl: None,
            dir: None,
            keep: false,
            state: None,
            bin_dir: None,
            master_args: Vec::new(),
            agent_args: Vec::new(),
            env: Vec::new(),
            master_ready_timeout: Duration::from_secs(15),
            nodes_up_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            interrupt: None,
            max_agents: DEFAULT_MAX_AGENTS,
            allow_root_jobs: nix::unistd::geteuid().is_root(),
            socket: None,
            agents_listen: None,
        }
    }
}

/// [`LocalCluster::start`] gave up because [`LocalClusterOptions::interrupt`] was set;
/// everything it started was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The working directory, if it is left in place (`dir` given, or `keep`).
    pub kept_dir: Option<PathBuf>,
}

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kept_dir {
            None => f.write_str("interrupted"),
            Some(d) => write!(f, "interrupted; state and logs kept in {}", d.display()),
        }
    }
}

impl std::error::Error for Interrupted {}

/// A running local cluster. Dropping it tears it down (best effort); call
/// [`shutdown`](Self::shutdown) to see problems.
#[derive(Debug)]
pub struct LocalCluster {
    mesh: (u32, u32),
    opts: LocalClusterOptions,
    dir: PathBuf,
    /// Remove `dir` at teardown.
    remove_dir: bool,
    master_bin: PathBuf,
    agent_bin: PathBuf,
    master: Option<Proc>,
    agents: BTreeMap<(u32, u32), Proc>,
    grpc: Option<SocketAddr>,
    /// The master's port for agents (mutual TLS).
    agents_port: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    master_url: String,
    metrics_url: String,
    torn_down: bool,
    /// Dropped after `Drop::drop` has torn everything down: the end of its thread would
    /// SIGTERM any process still running.
    spawner: Spawner,
}

/// The directory the binaries are looked up in by default: the current executable's, or
/// its parent for test executables in `target/*/deps/`.
pub fn default_bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the current executable")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("the current executable {} has no directory", exe.display()))?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps")
        && !dir.join(MASTER_BIN).exists()
        && let Some(parent) = dir.parent()
    {
        return Ok(parent.to_path_buf());
    }
    Ok(dir)
}

fn find_bin(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if path.is_file() {
        return Ok(path);
    }
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "this program".into());
    bail!(
        "{name} not found next to {me} in {}; build the workspace: cargo build --release",
        dir.display()
    )
}

/// The last `lines` lines of a file (at most its last 64 KiB), for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            if tail.is_empty() {
                "(empty)".into()
            } else {
                tail.join("\n")
            }
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn with_tail(msg: String, log: &Path) -> anyhow::Error {
    anyhow!(
        "{msg}; last lines of {}:\n{}",
        log.display(),
        log_tail(log, TAIL_LINES)
    )
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with {c}"),
        (None, Some(s)) => format!(
            "was killed by {}",
            Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {s}"))
        ),
        _ => format!("ended ({status})"),
    }
}

/// What the master's ready file says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ready {
    grpc: SocketAddr,
    agents: SocketAddr,
    socket: PathBuf,
    metrics: SocketAddr,
}

/// Parse a ready file: `grpc=`, `agents=`, `socket=` and `metrics=` lines. `None` until
/// all are there.
fn parse_ready(text: &str) -> Option<Ready> {
    let mut grpc = None;
    let mut agents = None;
    let mut socket = None;
    let mut metrics = None;
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = v.strip_prefix("http://").unwrap_or(v).trim_end_matches('/');
        let v = v.strip_suffix("/metrics").unwrap_or(v);
        match k.trim() {
            "grpc" => grpc = v.parse().ok(),
            "agents" => agents = v.parse().ok(),
            "socket" => socket = Some(PathBuf::from(v)),
            "metrics" => metrics = v.parse().ok(),
            _ => {}
        }
    }
    Some(Ready {
        grpc: grpc?,
        agents: agents?,
        socket: socket?,
        metrics: metrics?,
    })
}

/// Run a future to completion on a runtime of its own, on a thread of its own (so that
/// blocking callers inside a runtime work too).
fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build a tokio runtime")
                .block_on(f)
        })
        .join()
        .expect("the polling thread does not panic")
    })
}

impl LocalCluster {
    /// Start a `mesh.0` x `mesh.1` cluster and wait until every node is up.
    ///
    /// A mesh over the ceiling ([`LocalClusterOptions::max_agents`]) is refused with a
    /// [`CeilingError`] before anything is looked up or started. On error everything
    /// started so far is torn down; the error quotes the log of the process that failed.
    /// When [`LocalClusterOptions::interrupt`] is set it fails with [`Interrupted`] (both
    /// can be found with `downcast_ref`).
    pub fn start(mesh: (u32, u32), opts: LocalClusterOptions) -> Result<LocalCluster> {
        if mesh.0 == 0 || mesh.1 == 0 {
            bail!("the mesh must be at least 1x1, got {}x{}", mesh.0, mesh.1);
        }
        check_mesh(mesh, opts.max_agents)?;
        let bin_dir = match &opts.bin_dir {
            Some(d) => d.clone(),
            None => default_bin_dir()?,
        };
        let master_bin = find_bin(&bin_dir, MASTER_BIN)?;
        let agent_bin = find_bin(&bin_dir, AGENT_BIN)?;
        let spawner = Spawner::new().context("cannot start the process-starting thread")?;

        let (dir, remove_dir) = match &opts.dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .with_context(|| format!("cannot create {}", d.display()))?;
                (std::path::absolute(d).unwrap_or_else(|_| d.clone()), false)
            }
            None => {
                let d = tempfile::Builder::new()
                    .prefix("gang-cluster-")
                    .tempdir()
                    .context("cannot create a temporary directory")?
                    .keep();
                (d, !opts.keep)
            }
        };

        let mut cluster = LocalCluster {
            mesh,
            opts,
            dir,
            remove_dir,
            master_bin,
            agent_bin,
            master: None,
            agents: BTreeMap::new(),
            grpc: None,
            agents_port: None,
            metrics: None,
            master_url: String::new(),
            metrics_url: String::new(),
            torn_down: false,
            spawner,
        };
        // From here on, an early return drops `cluster`, which tears down what started.
        cluster.check_interrupt()?;
        // The cluster's own CA and certificates (kept if `dir` already has them).
        let pki = cluster.pki();
        if !pki.ca().exists() {
            Pki::init(pki.dir(), mesh.0, mesh.1, 30)
                .context("cannot make the cluster's certificates")?;
        }
        cluster.start_master()?;
        for y in 0..mesh.1 {
            for x in 0..mesh.0 {
                cluster.check_interrupt()?;
                cluster.spawn_agent(x, y)?;
            }
        }
        let timeout = cluster.opts.nodes_up_timeout;
        cluster.wait_nodes_up(timeout)?;
        Ok(cluster)
    }

    /// `unix:DIR/master.sock`: what `--master` / `GANG_MASTER` take (the master knows
    /// local callers by the socket's peer credentials).
    pub fn master_addr(&self) -> &str {
        &self.master_url
    }

    /// `https://127.0.0.1:PORT`: the master's TLS port for remote clients (they need
    /// [`Self::ca`] and a token or a user certificate).
    pub fn master_tls_addr(&self) -> Option<String> {
        self.grpc.map(|a| format!("https://{a}"))
    }

    /// A channel to the master's socket: calls are made as this process's user.
    pub async fn channel(&self) -> Result<client::MasterChannel> {
        let target = Target::parse(&self.master_url).map_err(|e| anyhow!(e))?;
        client::connect(&target, &Default::default(), Duration::from_secs(5))
            .await
            .map_err(|e| anyhow!("cannot reach the master at {}: {e:?}", self.master_url))
    }

    /// The master's port for agents.
    pub fn agents_addr(&self) -> Option<SocketAddr> {
        self.agents_port
    }

    /// The cluster's certificates (`DIR/tls`, in `gangctl certs init`'s layout).
    pub fn pki(&self) -> Pki {
        Pki::open(self.dir.join("tls"))
    }

    /// The cluster CA's certificate.
    pub fn ca(&self) -> PathBuf {
        self.pki().ca()
    }

    /// `http://127.0.0.1:PORT` of the master's metrics server (see [`Self::metrics_url`]).
    pub fn metrics_addr(&self) -> &str {
        &self.metrics_url
    }

    /// `http://127.0.0.1:PORT/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("{}/metrics", self.metrics_url)
    }

    /// The master's gRPC socket address.
    pub fn grpc_socket(&self) -> Option<SocketAddr> {
        self.grpc
    }

    /// The working directory (state, ready files, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn mesh(&self) -> (u32, u32) {
        self.mesh
    }

    pub fn master_log(&self) -> PathBuf {
        self.dir.join("master.log")
    }

    pub fn agent_log(&self, x: u32, y: u32) -> PathBuf {
        self.dir.join(format!("agent-{x}-{y}.log"))
    }

    /// The master's pid, while it runs.
    pub fn master_pid(&mut self) -> Option<u32> {
        running_pid(self.master.as_mut()?)
    }

    /// An agent's pid, while it runs.
    pub fn agent_pid(&mut self, x: u32, y: u32) -> Option<u32> {
        running_pid(self.agents.get_mut(&(x, y))?)
    }

    /// The pids of every process it started and has not reaped yet (running, or exited
    /// and not yet noticed). They are this process's children, and it reaps them itself:
    /// an owner that reaps other children (e.g. orphans it adopted as a subreaper) must
    /// leave these alone.
    pub fn pids(&self) -> Vec<u32> {
        self.master
            .iter()
            .chain(self.agents.values())
            .filter_map(Proc::unreaped_pid)
            .collect()
    }

    fn command(&self, bin: &Path, log: &Path) -> Result<Command> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(bin);
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .current_dir(&self.dir)
            .process_group(0);
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        Ok(cmd)
    }

    /// Start the master (again) and wait for its ready file. A restart reuses the ports of
    /// the first start, so agents and clients find it again.
    pub fn start_master(&mut self) -> Result<()> {
        if self.master_pid().is_some() {
            bail!("{MASTER_BIN} is already running");
        }
        let ready = self.dir.join("master.ready");
        let _ = std::fs::remove_file(&ready);
        let log = self.master_log();
        let listen = self
            .grpc
            .map_or("127.0.0.1:0".to_string(), |a| a.to_string());
        let agent_listen = self.agents_port.unwrap_or_else(|| {
            let host = self
                .opts
                .agents_listen
                .unwrap_or(Ipv4Addr::LOCALHOST.into());
            SocketAddr::new(host, 0)
        });
        let tls = self.pki().files(&PeerName::Master);
        let metrics = self
            .metrics
            .map_or("127.0.0.1:0".to_string(), |a| a.to_string());
        let mut cmd = self.command(&self.master_bin, &log)?;
        cmd.arg("--listen")
            .arg(&listen)
            .arg("--metrics-listen")
            .arg(&metrics)
            .arg("--state")
            .arg(
                self.opts
                    .state
                    .clone()
                    .unwrap_or_else(|| self.dir.join("state.db")),
            )
            .arg("--mesh")
            .arg(format!("{}x{}", self.mesh.0, self.mesh.1))
            .arg("--agent-listen")
            .arg(agent_listen.to_string())
            .arg("--socket")
            .arg(
                self.opts
                    .socket
                    .clone()
                    .unwrap_or_else(|| self.dir.join("master.sock")),
            )
            .arg("--token-key")
            .arg(self.dir.join("token.key"))
            .arg("--tls-ca")
            .arg(&tls.ca)
            .arg("--tls-cert")
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key);
        if self.opts.allow_root_jobs {
            cmd.arg("--allow-root-jobs");
        }
        if let Some(mpl) = self.opts.mpl {
            cmd.arg("--mpl").arg(mpl.to_string());
        }
        cmd.arg("--ready-file")
            .arg(&ready)
            .args(&self.opts.master_args);
        let child = self
            .spawner
            .spawn(cmd)
            .with_context(|| format!("cannot run {}", self.master_bin.display()))?;
        self.master = Some(child);

        let timeout = self.opts.master_ready_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            self.check_interrupt()?;
            let master = self.master.as_mut().expect("just spawned");
            if let Some(status) = master.poll()? {
                return Err(with_tail(
                    format!("{MASTER_BIN} {} before it was ready", describe(status)),
                    &log,
                ));
            }
            if let Some(r) = std::fs::read_to_string(&ready)
                .ok()
                .as_deref()
                .and_then(parse_ready)
            {
                self.grpc = Some(r.grpc);
                self.agents_port = Some(r.agents);
                self.metrics = Some(r.metrics);
                self.master_url = format!("unix:{}", r.socket.display());
                self.metrics_url = format!("http://{}", r.metrics);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.stop_master(Signal::SIGKILL);
                return Err(with_tail(
                    format!(
                        "{MASTER_BIN} did not write {} within {} s",
                        ready.display(),
                        timeout.as_secs_f64()
                    ),
                    &log,
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    fn spawn_agent(&mut self, x: u32, y: u32) -> Result<()> {
        let log = self.agent_log(x, y);
        let ready = self.dir.join(format!("agent-{x}-{y}.ready"));
        let _ = std::fs::remove_file(&ready);
        let mut cmd = self.command(&self.agent_bin, &log)?;
        let mut agents = self
            .agents_port
            .ok_or_else(|| anyhow!("the master's agent port is not known yet"))?;
        if agents.ip().is_unspecified() {
            agents.set_ip(match agents.ip() {
                IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let tls = self.pki().files(&PeerName::Node { x, y });
        cmd.arg("--master")
            .arg(format!("https://{agents}"))
            .arg("--tls-ca")
            .arg(&tls.ca)
            .arg("--tls-cert")
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key);
        if self.opts.allow_root_jobs {
            cmd.arg("--allow-root");
        }
        cmd.arg("--x")
            .arg(x.to_string())
            .arg("--y")
            .arg(y.to_string())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--ready-file")
            .arg(&ready)
            .args(&self.opts.agent_args);
        let child = self
            .spawner
            .spawn(cmd)
            .with_context(|| format!("cannot run {}", self.agent_bin.display()))?;
        self.agents.insert((x, y), child);
        Ok(())
    }

    /// Start the agent of node (x, y) (again, after [`stop_agent`](Self::stop_agent)).
    /// Does not wait for it to register; see [`wait_nodes_up`](Self::wait_nodes_up).
    pub fn start_agent(&mut self, x: u32, y: u32) -> Result<()> {
        if x >= self.mesh.0 || y >= self.mesh.1 {
            bail!(
                "node {x},{y} is outside the {}x{} mesh",
                self.mesh.0,
                self.mesh.1
            );
        }
        if self.agent_pid(x, y).is_some() {
            bail!("the agent of node {x},{y} is already running");
        }
        self.spawn_agent(x, y)
    }

    /// Send `signal` to the master and wait for it to exit (SIGKILL after the grace).
    pub fn stop_master(&mut self, signal: Signal) -> Result<ExitStatus> {
        let mut child = self
            .master
            .take()
            .ok_or_else(|| anyhow!("{MASTER_BIN} is not running"))?;
        let grace = self.opts.shutdown_grace;
        let (status, _killed) = procs::stop(&mut child, signal, grace)?;
        Ok(status)
    }

    /// Stop the master (SIGTERM) and start it again on the same ports and state.
    pub fn restart_master(&mut self) -> Result<()> {
        self.stop_master(Signal::SIGTERM)?;
        self.start_master()
    }

    /// Send `signal` to the agent of node (x, y) and wait for it to exit (SIGKILL after
    /// the grace).
    pub fn stop_agent(&mut self, x: u32, y: u32, signal: Signal) -> Result<ExitStatus> {
        let mut child = self
            .agents
            .remove(&(x, y))
            .ok_or_else(|| anyhow!("no agent of node {x},{y} is running"))?;
        let grace = self.opts.shutdown_grace;
        let (status, _killed) = procs::stop(&mut child, signal, grace)?;
        Ok(status)
    }

    fn interrupted(&self) -> bool {
        self.opts
            .interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn interrupted_error(&self) -> anyhow::Error {
        Interrupted {
            kept_dir: (!self.remove_dir).then(|| self.dir.clone()),
        }
        .into()
    }

    fn check_interrupt(&self) -> Result<()> {
        if self.interrupted() {
            return Err(self.interrupted_error());
        }
        Ok(())
    }

    /// Every process still running? An error names the first that is not, with its log.
    pub fn check_alive(&mut self) -> Result<()> {
        let log = self.master_log();
        match self.master.as_mut() {
            None => bail!("{MASTER_BIN} is not running"),
            Some(m) => {
                if let Some(status) = m.poll()? {
                    return Err(with_tail(
                        format!("{MASTER_BIN} {}", describe(status)),
                        &log,
                    ));
                }
            }
        }
        let mut dead = None;
        for (&(x, y), agent) in self.agents.iter_mut() {
            if let Some(status) = agent.poll()? {
                dead = Some((x, y, status));
                break;
            }
        }
        if let Some((x, y, status)) = dead {
            return Err(with_tail(
                format!("the agent of node {x},{y} {}", describe(status)),
                &self.agent_log(x, y),
            ));
        }
        Ok(())
    }

    /// Wait until the master reports every node up, failing early when a process dies.
    pub fn wait_nodes_up(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let url = self.master_url.clone();
        let expected = (self.mesh.0 * self.mesh.1) as usize;
        let mut last: Result<Vec<NodeInfo>> = Err(anyhow!("no answer yet"));
        let flag = self.opts.interrupt.clone();
        loop {
            self.check_interrupt()?;
            self.check_alive()?;
            // A ListNodes call may take seconds on a loaded machine; an interrupt must not
            // wait for it.
            let polled = block_on(async {
                tokio::select! {
                    r = list_nodes(url.clone()) => Some(r),
                    _ = until_set(flag.clone()) => None,
                }
            });
            let Some(polled) = polled else {
                return Err(self.interrupted_error());
            };
            if let Ok(nodes) = &polled
                && nodes.len() >= expected
                && nodes.iter().all(|n| n.state() == NodeState::Up)
            {
                return Ok(());
            }
            match polled {
                Ok(nodes) => last = Ok(nodes),
                Err(e) if last.is_err() => last = Err(e),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                break;
            }
            // In steps, so that an interrupt is seen within one.
            let next = Instant::now() + Duration::from_millis(100);
            while Instant::now() < next && !self.interrupted() {
                std::thread::sleep(POLL);
            }
        }
        let secs = timeout.as_secs_f64();
        match last {
            Err(e) => Err(with_tail(
                format!("the master at {url} did not list the nodes within {secs} s: {e:#}"),
                &self.master_log(),
            )),
            Ok(nodes) => {
                let mut not_up: Vec<(u32, u32, &'static str)> = Vec::new();
                for y in 0..self.mesh.1 {
                    for x in 0..self.mesh.0 {
                        let state = nodes
                            .iter()
                            .find(|n| n.x == x && n.y == y)
                            .map_or("missing", |n| n.state().label());
                        if state != "up" {
                            not_up.push((x, y, state));
                        }
                    }
                }
                let list: Vec<String> = not_up
                    .iter()
                    .map(|(x, y, s)| format!("{x},{y} ({s})"))
                    .collect();
                let msg = format!("nodes not up after {secs} s: {}", list.join(", "));
                match not_up.first() {
                    Some(&(x, y, _)) => Err(with_tail(msg, &self.agent_log(x, y))),
                    None => Err(anyhow!(msg)),
                }
            }
        }
    }

    /// Stop everything (the agents, then the master: SIGTERM, then SIGKILL after the
    /// grace), reap every process, and remove the directory if it was a temporary one not
    /// kept. An error reports what went wrong (a process that had to be killed or exited
    /// with an error); everything is torn down regardless.
    pub fn shutdown(mut self) -> Result<()> {
        let problems = self.teardown();
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }

    fn teardown(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        let grace = self.opts.shutdown_grace;
        let mut problems = Vec::new();
        // Agents first, so that they can still report their ranks' ends to the master;
        // then the master.
        let agents: Vec<(String, Proc)> = std::mem::take(&mut self.agents)
            .into_iter()
            .map(|((x, y), child)| (format!("the agent of node {x},{y}"), child))
            .collect();
        stop_all(agents, grace, &mut problems);
        if let Some(m) = self.master.take() {
            stop_all(vec![(MASTER_BIN.to_string(), m)], grace, &mut problems);
        }
        if self.remove_dir
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            problems.push(format!("cannot remove {}: {e}", self.dir.display()));
        }
        problems
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// SIGTERM every process group, wait for them all until `grace` has passed, SIGKILL the
/// rest; reap all. Problems are added to `problems`.
fn stop_all(mut procs: Vec<(String, Proc)>, grace: Duration, problems: &mut Vec<String>) {
    for (_, child) in procs.iter_mut() {
        if matches!(child.poll(), Ok(None)) {
            child.signal(Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    for (name, child) in procs.iter_mut() {
        match child.wait_until(deadline) {
            Ok(Some(status)) => {
                let by_term = status.signal() == Some(Signal::SIGTERM as i32);
                if !(status.success() || by_term) {
                    problems.push(format!("{name} {}", describe(status)));
                }
            }
            Ok(None) => {
                let _ = child.kill();
                problems.push(format!(
                    "{name} did not exit within {} s of SIGTERM and was killed",
                    grace.as_secs_f64()
                ));
            }
            Err(e) => {
                let _ = child.kill();
                problems.push(format!("waiting for {name}: {e}"));
            }
        }
    }
}

fn running_pid(child: &mut Proc) -> Option<u32> {
    matches!(child.poll(), Ok(None)).then(|| child.id())
}

/// Resolves once `flag` is set; never without one.
async fn until_set(flag: Option<Arc<AtomicBool>>) {
    let Some(flag) = flag else {
        return std::future::pending().await;
    };
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(POLL).await;
    }
}

async fn list_nodes(url: String) -> Result<Vec<NodeInfo>> {
    let call = async {
        let target = Target::parse(&url).map_err(|e| anyhow!(e))?;
        let channel = client::connect(&target, &Default::default(), Duration::from_secs(2))
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let resp = AdminServiceClient::new(channel)
            .list_nodes(ListNodesRequest {})
            .await?;
        Ok::<_, anyhow::Error>(resp.into_inner().nodes)
    };
    tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .map_err(|_| anyhow!("ListNodes timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_files() {
        let want = Ready {
            grpc: "127.0.0.1:4000".parse().unwrap(),
            agents: "127.0.0.1:4002".parse().unwrap(),
            socket: PathBuf::from("/tmp/x/master.sock"),
            metrics: "127.0.0.1:4001".parse().unwrap(),
        };
        assert_eq!(
            parse_ready(
                "grpc=127.0.0.1:4000\nagents=127.0.0.1:4002\nsocket=/tmp/x/master.sock\nmetrics=127.0.0.1:4001\n"
            ),
            Some(want.clone())
        );
        assert_eq!(
            parse_ready(
                "metrics=http://127.0.0.1:4001/metrics\nsocket=/tmp/x/master.sock\nagents=127.0.0.1:4002\ngrpc=http://127.0.0.1:4000\n"
            ),
            Some(want)
        );
        assert_eq!(
            parse_ready("grpc=127.0.0.1:4000\nmetrics=127.0.0.1:4001\n"),
            None
        );
        assert_eq!(parse_ready(""), None);
    }

    #[test]
    fn tails() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, text).unwrap();
        assert_eq!(log_tail(&p, 2), "line 29\nline 30");
        std::fs::write(&p, "").unwrap();
        assert_eq!(log_tail(&p, 2), "(empty)");
        assert!(log_tail(&dir.path().join("nope"), 2).starts_with("(cannot read"));
    }

    #[test]
    fn missing_binaries_are_reported_before_anything_starts() {
        let empty = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let opts = LocalClusterOptions {
            bin_dir: Some(empty.path().to_path_buf()),
            dir: Some(work.path().join("cluster")),
            ..Default::default()
        };
        let e = LocalCluster::start((2, 2), opts).unwrap_err().to_string();
        assert!(e.starts_with("gang-master not found next to "), "{e}");
        assert!(e.contains(&empty.path().display().to_string()), "{e}");
        assert!(!work.path().join("cluster").exists(), "nothing created");
    }

    fn fake_bins(master: &str, agent: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let bins = tempfile::tempdir().unwrap();
        for (name, text) in [(MASTER_BIN, master), (AGENT_BIN, agent)] {
            let p = bins.path().join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bins
    }

    /// Alive, as opposed to gone or a zombie.
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_string();
                Some(state != "Z" && state != "X")
            })
            .unwrap_or(false)
    }

    #[test]
    fn a_mesh_over_the_ceiling_is_refused_before_anything_starts() {
        let work = tempfile::tempdir().unwrap();
        let opts = LocalClusterOptions {
            // Not even looked for: the ceiling comes first.
            bin_dir: Some(work.path().join("no-bins")),
            dir: Some(work.path().join("cluster")),
            ..Default::default()
        };
        let e = LocalCluster::start((100, 100), opts.clone()).unwrap_err();
        let ceiling = e.downcast_ref::<CeilingError>().expect("a CeilingError");
        assert!(
            matches!(
                ceiling,
                CeilingError::TooManyAgents {
                    needed: 10000,
                    max_agents: 64,
                    ..
                }
            ),
            "{ceiling:?}"
        );
        assert!(!work.path().join("cluster").exists(), "nothing created");

        let e = LocalCluster::start((9, 8), opts.clone()).unwrap_err();
        assert!(e.to_string().contains("max_agents 72, at most 1024"), "{e}");
        let e = LocalCluster::start(
            (1, 1),
            LocalClusterOptions {
                max_agents: MAX_AGENTS_BOUND + 1,
                ..opts
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("1025 is above 1024"), "{e}");
    }

    /// Fake daemons: a master that writes its ready file and sleeps; agents that never
    /// register, each with a helper in its process group. An interrupt while start waits
    /// for the nodes ends it at once (not after nodes_up_timeout), and every process,
    /// helpers included, is gone.
    #[test]
    fn an_interrupt_while_waiting_for_nodes_stops_everything_at_once() {
        let master = "#!/bin/sh\n\
            while [ $# -gt 0 ]; do [ \"$1\" = --ready-file ] && ready=$2; shift; done\n\
            echo $$ > master.pids\n\
            printf 'grpc=127.0.0.1:1\\nagents=127.0.0.1:1\\nsocket=/nonexistent\\nmetrics=127.0.0.1:1\\n' > \"$ready\"\n\
            exec sleep 600\n";
        let agent = "#!/bin/sh\nsleep 600 &\necho \"$$ $!\" > agent-$$.pids\nexec sleep 600\n";
        let bins = fake_bins(master, agent);
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("cluster");
        let flag = Arc::new(AtomicBool::new(false));
        let opts = LocalClusterOptions {
            bin_dir: Some(bins.path().to_path_buf()),
            dir: Some(dir.clone()),
            nodes_up_timeout: Duration::from_secs(120),
            interrupt: Some(flag.clone()),
            ..Default::default()
        };
        let pid_files = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|x| x == "pids"))
                        .collect()
                })
                .unwrap_or_default()
        };
        let setter = {
            let dir = dir.clone();
            let flag = flag.clone();
            std::thread::spawn(move || {
                // The master and the four agents (and helpers) are up: start is waiting.
                let deadline = Instant::now() + Duration::from_secs(30);
                while pid_files(&dir).len() < 5 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                flag.store(true, Ordering::SeqCst);
                Instant::now()
            })
        };
        let e = LocalCluster::start((2, 2), opts).unwrap_err();
        let returned = Instant::now();
        let set_at = setter.join().unwrap();
        assert_eq!(
            e.downcast_ref::<Interrupted>(),
            Some(&Interrupted {
                kept_dir: Some(dir.clone())
            }),
            "{e:#}"
        );
        // Teardown included: the fake daemons die at SIGTERM.
        assert!(
            returned - set_at < Duration::from_secs(5),
            "took {:?} after the interrupt",
            returned - set_at
        );
        let pids: Vec<u32> = pid_files(&dir)
            .iter()
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .split_whitespace()
                    .map(|w| w.parse::<u32>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(pids.len(), 9, "master, 4 agents, 4 helpers: {pids:?}");
        // The helpers were orphaned to init (or a subreaper) when SIGKILLed: give it a
        // moment to reap them.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "still alive: {left:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A master that exits at once: the error quotes its log; nothing is left running.
    #[test]
    fn master_dying_early_is_reported_with_its_log() {
        let script = "#!/bin/sh\necho \"bad flag: $2\" >&2\nexit 3\n";
        let bins = fake_bins(script, script);
        let opts = LocalClusterOptions {
            bin_dir: Some(bins.path().to_path_buf()),
            ..Default::default()
        };
        let e = LocalCluster::start((1, 1), opts).unwrap_err().to_string();
        assert!(
            e.starts_with("gang-master exited with 3 before it was ready"),
            "{e}"
        );
        assert!(e.contains("bad flag: 127.0.0.1:0"), "{e}");
    }
}
