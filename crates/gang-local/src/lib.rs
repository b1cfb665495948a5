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

mod agent_procs;
mod bins;
mod ceiling;
pub mod driver;
pub mod hosts;
mod lifecycle;
mod logs;
mod options;
mod poll;
pub mod proc_table;
mod procs;
mod ready;
mod standby;
pub mod unit;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use gang_auth::pki::Pki;
use gang_proto::client::{self, Target};
use nix::sys::signal::Signal;

/// A daemon's `--tls-ca`, `--tls-cert` and `--tls-key`.
fn tls_args(cmd: &mut Command, tls: &gang_auth::pki::TlsFiles) {
    cmd.arg("--tls-ca")
        .arg(&tls.ca)
        .arg("--tls-cert")
        .arg(&tls.cert)
        .arg("--tls-key")
        .arg(&tls.key);
}

use bins::find_bin;
pub use bins::{AGENT_BIN, MASTER_BIN, default_bin_dir};
pub use ceiling::{
    CeilingError, DEFAULT_MAX_AGENTS, MAX_AGENTS_BOUND, MAX_EMULATED_NODES, check_emulated,
    check_mesh, cores,
};
use logs::{describe, with_tail};
pub use logs::{error_chain, log_tail};
pub use options::{Interrupted, LocalClusterOptions};
pub use procs::with_default_signals;
use procs::{Proc, Spawner, running_pid};
use ready::parse_ready;

const POLL: Duration = Duration::from_millis(25);
/// The master's nice value in a local cluster (where permitted): ahead of the ranks.
const MASTER_NICE: libc::c_int = -10;

/// A running local cluster. Dropping it tears it down (best effort); call
/// [`shutdown`](Self::shutdown) to see problems.
#[derive(Debug)]
pub struct LocalCluster {
    mesh: (u32, u32),
    opts: LocalClusterOptions,
    dir: PathBuf,
    /// Remove `dir` at teardown.
    remove_dir: bool,
    /// The agents' messaging-library directories (`--msg-dir`): outside `dir`, which is
    /// private, so that ranks of any user reach their own; one per cluster, so clusters
    /// on one machine never share a rank's directory. Always removed at teardown.
    msg_dir: PathBuf,
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
    /// The portal's URL, when the master serves it (`--portal`).
    portal_url: Option<String>,
    torn_down: bool,
    /// Dropped after `Drop::drop` has torn everything down: the end of its thread would
    /// SIGTERM any process still running.
    spawner: Spawner,
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
        match opts.emulate {
            Some(per) => ceiling::check_emulated(mesh, per).map_err(|e| anyhow!(e))?,
            None => check_mesh(mesh, opts.max_agents)?,
        }
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

        // In shared memory (tmpfs) where there is some: the ranks' pages are shared
        // mappings, and files made on a disk file system slow every launch down.
        let shm = std::path::Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder
            .prefix("gang-msg-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o711));
        let msg_dir = if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .context("cannot create a temporary directory")?
        .keep();
        let mut cluster = LocalCluster {
            mesh,
            opts,
            dir,
            remove_dir,
            msg_dir,
            master_bin,
            agent_bin,
            master: None,
            agents: BTreeMap::new(),
            grpc: None,
            agents_port: None,
            metrics: None,
            master_url: String::new(),
            metrics_url: String::new(),
            portal_url: None,
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
        match cluster.opts.emulate {
            Some(per) => {
                // Whole rows a process: its block is (0, y0) to (W-1, y0+rows-1).
                let rows = (per / mesh.0).max(1);
                for y0 in (0..mesh.1).step_by(rows as usize) {
                    cluster.check_interrupt()?;
                    cluster.spawn_emulated(y0, rows.min(mesh.1 - y0))?;
                }
            }
            None => {
                for y in 0..mesh.1 {
                    for x in 0..mesh.0 {
                        cluster.check_interrupt()?;
                        cluster.spawn_agent(x, y)?;
                    }
                }
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

    /// Where a browser on this host opens the portal, when the master serves it.
    pub fn portal_url(&self) -> Option<&str> {
        self.portal_url.as_deref()
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

    /// How the master exited, once it has (it stays this cluster's until stopped).
    pub fn master_exit_status(&mut self) -> Option<ExitStatus> {
        self.master.as_mut()?.poll().ok().flatten()
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
        // The daemons log every job's argv and working directory: for whoever started
        // the cluster only, whatever the umask or the directory's mode.
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(log)
            .and_then(|f| {
                f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                Ok(f)
            })
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
        let metrics = self
            .metrics
            .map_or("127.0.0.1:0".to_string(), |a| a.to_string());
        let socket = self
            .opts
            .socket
            .clone()
            .unwrap_or_else(|| self.dir.join("master.sock"));
        let files = (log.as_path(), socket.as_path(), ready.as_path());
        let mut cmd = self.master_command(files, &listen, &metrics, agent_listen, None)?;
        procs::ahead_of_ranks(&mut cmd, MASTER_NICE);
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
                self.portal_url = r.portal;
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
}

#[cfg(test)]
mod tests;

/// GET `path` of `addr` (`http://HOST:PORT` or `HOST:PORT`) over HTTP/1.0: the whole
/// response, headers included (tests and benches read the master's metrics with it).
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = addr.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("metrics endpoint reachable");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request sent");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response read");
    out
}
