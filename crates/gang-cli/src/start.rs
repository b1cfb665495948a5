//! `gangctl start`: a whole cluster on this machine, for a demo or a test, torn down on
//! any signal at any moment.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use gang_core::GangMode;
use gang_local::hosts::{ClockSkew, EmulatedHosts, HostsOptions, MAX_HOSTS};
use gang_local::{DEFAULT_MAX_AGENTS, Interrupted, LocalCluster, LocalClusterOptions};
use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::connect::CliError;
use crate::gang_mode;
use crate::parse::{parse_max_agents, parse_mesh};
use crate::signals::{self, Caught, StopSignals};
use crate::strays;

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The mesh, as WxH (e.g. 4x4): one agent process per node.
    #[arg(long, value_name = "WxH", value_parser = parse_mesh)]
    pub mesh: (u32, u32),

    /// The most agents (W*H) to start on this machine, at most 1024.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_AGENTS, value_parser = parse_max_agents)]
    pub max_agents: usize,

    /// Emulated nodes, a test tool for fleets larger than this machine: a real master and
    /// real agent code, N nodes to a process (default 1024), whose ranks are played, not
    /// run (true, false, sleep S, echo, hostname, fence ROUNDS BYTES, sh -c 'sleep S; exit
    /// N'). Up to 16,384 nodes; see the README, "Emulated fleets".
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "1024",
        conflicts_with = "hosts",
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub emulate: Option<u32>,

    /// Slices of the Ousterhout matrix (multiprogramming level); default: the master's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub mpl: Option<u32>,

    /// Length of a time slot in ms (gang-master --quantum-ms); default: the master's.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub quantum_ms: Option<u32>,

    /// How jobs that do not choose (prun --gang) are switched (gang-master --gang-mode);
    /// default: the master's.
    #[arg(long, value_name = "MODE", value_parser = gang_mode::parser())]
    pub gang_mode: Option<GangMode>,

    /// An extra gang-master flag (repeat for each word: --master-arg=--table-lead-ms
    /// --master-arg=40).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        conflicts_with = "hosts"
    )]
    pub master_arg: Vec<String>,

    /// An extra flag for every gang-agent (repeat for each word: --agent-arg=--clock
    /// --agent-arg=host).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        conflicts_with = "hosts"
    )]
    pub agent_arg: Vec<String>,

    /// Emulated hosts: K separate hosts on this machine, each with its own network,
    /// mounts, hostname, machine-id and systemd as PID 1, running the agents from
    /// deploy/gang-agent.service; the master on a host of its own from
    /// deploy/gang-master.service. The mesh is split over the K hosts. Root only.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HOSTS)))]
    pub hosts: Option<u32>,

    /// With --hosts: each host's wall clock off the real one, the master's host first
    /// (e.g. 0,+40ms,-25ms; ns, us, ms or s; hosts past the list's end keep the real
    /// time). Every process of a host sees it, in reads and absolute timers alike.
    #[arg(long, value_name = "LIST", requires = "hosts", value_delimiter = ',', allow_hyphen_values = true, value_parser = parse_host_offset)]
    pub host_clock_offsets: Vec<i64>,

    /// With --hosts: how fast each host's clock runs off the real one, in parts per
    /// million, the master's host first (e.g. 0,50,-30).
    #[arg(
        long,
        value_name = "LIST",
        requires = "hosts",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub host_drift_ppm: Vec<f64>,

    /// Keep the temporary directory (state, logs) after the cluster stops.
    #[arg(long)]
    pub keep: bool,

    /// Use this directory for state and logs (created if missing, never removed).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Where gang-master and gang-agent are (default: next to gangctl).
    #[arg(long, value_name = "DIR", hide = true)]
    pub bin_dir: Option<PathBuf>,

    /// Command to run against the cluster (GANG_MASTER set in its environment).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How long CMD may take to exit after gangctl passed it a signal, before SIGKILL.
const CMD_GRACE: Duration = Duration::from_secs(5);
/// How long the last sweep may take to stop orphans left under gangctl.
const STRAYS_GRACE: Duration = Duration::from_secs(5);

/// `gangctl start`. `signals` were taken over before any thread started, so no signal
/// ends gangctl the default way: each one reaches a loop below, which stops what has
/// started and only then exits.
pub async fn start(args: StartArgs, mut signals: StopSignals) -> Result<i32, CliError> {
    // Orphans of anything below us (a rank's child when its agent was killed, a daemon
    // CMD left running) come to us, not to init, and are stopped at the end.
    strays::become_subreaper()
        .map_err(|e| CliError::other(format!("cannot become a child subreaper: {e}")))?;

    let (w, h) = args.mesh;
    let interrupted = Arc::new(AtomicBool::new(false));
    let mut master_args = Vec::new();
    if let Some(q) = args.quantum_ms {
        master_args.extend(["--quantum-ms".to_string(), q.to_string()]);
    }
    if let Some(g) = args.gang_mode {
        master_args.extend(["--gang-mode".to_string(), g.as_str().to_string()]);
    }
    master_args.extend(args.master_arg.iter().cloned());
    let mut starting = match args.hosts {
        None => {
            let opts = LocalClusterOptions {
                mpl: args.mpl,
                master_args,
                agent_args: args.agent_arg.clone(),
                dir: args.dir.clone(),
                keep: args.keep,
                bin_dir: args.bin_dir.clone(),
                interrupt: Some(interrupted.clone()),
                max_agents: args.max_agents,
                emulate: args.emulate,
                // Thousands of nodes register with one master on a small machine.
                nodes_up_timeout: if args.emulate.is_some() {
                    Duration::from_secs(600)
                } else {
                    LocalClusterOptions::default().nodes_up_timeout
                },
                ..Default::default()
            };
            tokio::task::spawn_blocking(move || {
                LocalCluster::start((w, h), opts).map(|c| Cluster::Local(Box::new(c)))
            })
        }
        Some(k) => {
            let mut opts = HostsOptions {
                hosts: k,
                bin_dir: args.bin_dir.clone(),
                dir: args.dir.clone(),
                keep: args.keep,
                interrupt: Some(interrupted.clone()),
                ..Default::default()
            };
            let key = |k: &str, v: i64| (k.to_string(), toml::Value::Integer(v));
            opts.image
                .master_keys
                .extend(args.mpl.map(|m| key("mpl", m.into())));
            opts.image
                .master_keys
                .extend(args.quantum_ms.map(|q| key("quantum_ms", q.into())));
            let n = args.host_clock_offsets.len().max(args.host_drift_ppm.len());
            if n > 0 {
                opts.clocks = Some(
                    (0..n)
                        .map(|i| ClockSkew {
                            offset_ns: args.host_clock_offsets.get(i).copied().unwrap_or(0),
                            drift_ppm: args.host_drift_ppm.get(i).copied().unwrap_or(0.0),
                        })
                        .collect(),
                );
            }
            opts.image.master_keys.extend(args.gang_mode.map(|g| {
                (
                    "gang_mode".to_string(),
                    toml::Value::String(g.as_str().to_string()),
                )
            }));
            tokio::task::spawn_blocking(move || {
                EmulatedHosts::start((w, h), opts).map(|c| Cluster::Hosts(Box::new(c)))
            })
        }
    };
    let mut stopped_by: Option<Caught> = None;
    let started = loop {
        tokio::select! {
            r = &mut starting => break r,
            c = signals.recv() => {
                // The start gives up within ~25 ms, whatever it waits for, and tears
                // down what it started before it returns.
                interrupted.store(true, Ordering::SeqCst);
                if stopped_by.is_none() {
                    eprintln!("gangctl: {} while starting the cluster: stopping it", c.signal);
                    stopped_by = Some(c);
                }
            }
        }
    };
    let mut cluster = match (started, stopped_by) {
        (Ok(Ok(cluster)), None) => cluster,
        (Ok(Ok(cluster)), Some(c)) => {
            // The signal came as the cluster finished starting.
            stop_cluster(cluster, args.keep || args.dir.is_some()).await;
            sweep_strays();
            return Ok(c.exit_code());
        }
        (Ok(Err(e)), Some(c)) => {
            match e.downcast_ref::<Interrupted>() {
                Some(Interrupted {
                    kept_dir: Some(dir),
                }) => eprintln!("gangctl: state and logs kept in {}", dir.display()),
                Some(_) => {}
                None => eprintln!("gangctl: {e:#}"),
            }
            sweep_strays();
            return Ok(c.exit_code());
        }
        (Ok(Err(e)), None) => {
            sweep_strays();
            return Err(CliError::other(format!("{e:#}")));
        }
        (Err(e), _) => {
            sweep_strays();
            return Err(CliError::other(format!("starting the cluster: {e}")));
        }
    };

    let master = cluster.master_addr();
    eprintln!("gangctl: {}", cluster.describe());
    // Other terminals find this cluster with nothing set (see local_master).
    let recorded = match crate::local_master::write(&master) {
        Ok(path) => {
            eprintln!("gangctl: address written to {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("gangctl: cannot record the address for other shells: {e}");
            false
        }
    };
    if args.command.is_empty() {
        // On stdout, for `eval`; CMD's stdout is its own, so with CMD it goes to stderr.
        println!("export GANG_MASTER={master}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    } else {
        eprintln!("export GANG_MASTER={master}");
    }

    let mut code = 0;
    // Orphans that exited are reaped as they come, so they do not pile up as zombies.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    if let Some((program, rest)) = args.command.split_first() {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(rest).env("GANG_MASTER", &master);
        // prun and gangctl (next to this executable) come first in the command's PATH.
        if let Some(path) = path_with_our_dir() {
            cmd.env("PATH", path);
        }
        let me = std::process::id();
        // SAFETY: runs in the forked child before exec and only makes async-signal-safe
        // system calls (pthread_sigmask, prctl, getppid); it allocates nothing.
        unsafe {
            // If gangctl dies without a teardown (SIGKILL), CMD hears of it as a hangup.
            // Spawned on the runtime's thread, which lives as long as gangctl.
            cmd.pre_exec(move || {
                signals::unblock_all()?;
                nix::sys::prctl::set_pdeathsig(Signal::SIGHUP)?;
                if nix::unistd::getppid().as_raw() as u32 != me {
                    return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Err(e) => {
                eprintln!("gangctl: cannot run {program}: {e}");
                code = 127;
            }
            Ok(mut child) => {
                let cmd_pid = child.id();
                let mut kill_at: Option<Instant> = None;
                code = loop {
                    let grace_over = async {
                        match kill_at {
                            Some(t) => tokio::time::sleep_until(t).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        status = child.wait() => break match status {
                            Ok(s) => exit_code(s),
                            Err(e) => { eprintln!("gangctl: waiting for {program}: {e}"); 1 }
                        },
                        c = signals.recv() => {
                            if stopped_by.is_some() {
                                // A second signal: no more patience.
                                let _ = child.start_kill();
                                continue;
                            }
                            if c.signal == Signal::SIGINT && c.from_terminal {
                                // The terminal sent the Ctrl-C to CMD too; it decides (an
                                // interactive shell stays, prun cancels its job and exits).
                                continue;
                            }
                            eprintln!("gangctl: {}: stopping {program} and the cluster", c.signal);
                            if !c.from_terminal && let Some(pid) = child.id() {
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    c.signal,
                                );
                            }
                            stopped_by = Some(c);
                            kill_at = Some(Instant::now() + CMD_GRACE);
                        }
                        _ = grace_over => {
                            eprintln!(
                                "gangctl: {program} did not exit within {} s: killing it",
                                CMD_GRACE.as_secs()
                            );
                            let _ = child.start_kill();
                            kill_at = None;
                        }
                        _ = tick.tick() => {
                            let mut owned = cluster.pids();
                            owned.extend(cmd_pid);
                            strays::reap_exited(&owned);
                        }
                    }
                };
            }
        }
    } else {
        eprintln!("gangctl: Ctrl-C to stop the cluster");
        loop {
            tokio::select! {
                // Stopping the cluster is what it waits for: exit 0.
                c = signals.recv() => {
                    eprintln!("gangctl: {}: stopping the cluster", c.signal);
                    break;
                }
                _ = tick.tick() => {
                    if let Err(e) = cluster.check_alive() {
                        eprintln!("gangctl: {e:#}");
                        code = 1;
                        break;
                    }
                    strays::reap_exited(&cluster.pids());
                }
            }
        }
    }

    if recorded {
        crate::local_master::remove_if(&master);
    }
    let keep = args.keep || args.dir.is_some();
    stop_cluster(cluster, keep).await;
    sweep_strays();
    Ok(stopped_by.map_or(code, |c| c.exit_code()))
}

/// What `gangctl start` runs: a local cluster, or emulated hosts (`--hosts`).
enum Cluster {
    Local(Box<LocalCluster>),
    Hosts(Box<EmulatedHosts>),
}

impl Cluster {
    fn master_addr(&self) -> String {
        match self {
            Cluster::Local(c) => c.master_addr().to_string(),
            Cluster::Hosts(c) => c.master_addr(),
        }
    }

    fn dir(&self) -> PathBuf {
        match self {
            Cluster::Local(c) => c.dir().to_path_buf(),
            Cluster::Hosts(c) => c.dir().to_path_buf(),
        }
    }

    fn pids(&self) -> Vec<u32> {
        match self {
            Cluster::Local(c) => c.pids(),
            Cluster::Hosts(c) => c.pids(),
        }
    }

    fn check_alive(&mut self) -> Result<(), String> {
        match self {
            Cluster::Local(c) => c.check_alive(),
            Cluster::Hosts(c) => c.check_alive(),
        }
        .map_err(|e| format!("{e:#}"))
    }

    fn shutdown(self) -> Result<(), String> {
        match self {
            Cluster::Local(c) => c.shutdown(),
            Cluster::Hosts(c) => c.shutdown(),
        }
        .map_err(|e| format!("{e:#}"))
    }

    /// The "cluster up" lines.
    fn describe(&self) -> String {
        match self {
            Cluster::Local(c) => {
                let (w, h) = c.mesh();
                format!(
                    "cluster up: {w}x{h} mesh, master at {}, metrics at {}, logs in {}",
                    c.master_addr(),
                    c.metrics_url(),
                    c.dir().display()
                )
            }
            Cluster::Hosts(c) => {
                let (w, h) = c.layout().mesh;
                let mut s = format!(
                    "cluster up on {} emulated hosts: {w}x{h} mesh, master at {}, files in {}",
                    c.layout().hosts.len(),
                    c.master_addr(),
                    c.dir().display()
                );
                for (i, plan) in c.layout().hosts.iter().enumerate() {
                    let what = if i == 0 {
                        "gang-master.service".to_string()
                    } else {
                        plan.nodes
                            .iter()
                            .map(|((x, y), _)| format!("({x},{y})"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    s.push_str(&format!(
                        "\n  {:<8} {:<12} {what}   (enter: nsenter -t {} -a; logs: journalctl there)",
                        plan.name,
                        plan.addr,
                        c.init_pid(i)
                    ));
                }
                s
            }
        }
    }
}

fn parse_host_offset(s: &str) -> Result<i64, String> {
    gang_local::hosts::parse_offset(s)
}

/// Tear the cluster down (signals meanwhile wait in their channel: the teardown is
/// bounded by the shutdown grace).
async fn stop_cluster(cluster: Cluster, keep: bool) {
    let dir = cluster.dir();
    match tokio::task::spawn_blocking(move || cluster.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("gangctl: stopping the cluster: {e:#}"),
        Err(e) => eprintln!("gangctl: stopping the cluster: {e}"),
    }
    if keep {
        eprintln!("gangctl: state and logs kept in {}", dir.display());
    }
}

/// Stop whatever is left below us once the cluster and CMD are reaped.
fn sweep_strays() {
    let n = strays::stop_all(STRAYS_GRACE);
    if n > 0 {
        eprintln!("gangctl: killed {n} leftover process(es) started under the cluster or CMD");
    }
}

/// `PATH` with the directory of this executable in front.
fn path_with_our_dir() -> Option<std::ffi::OsString> {
    let exe = std::env::current_exe().ok()?;
    let ours = exe.parent()?.to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(ours).chain(std::env::split_paths(&rest));
    std::env::join_paths(dirs).ok()
}

/// A child's exit status as a shell would report it: the code, or 128+signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}
