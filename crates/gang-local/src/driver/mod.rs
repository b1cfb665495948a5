//! The driver of `gangctl start`: a whole cluster on this machine (a local cluster, or
//! emulated hosts with `--hosts`) for a demo or a test, a command run against it, and
//! everything torn down on any signal at any moment. The CLI only parses the command
//! line into a [`StartPlan`] and calls [`start`].
//!
//! - `cluster.rs`: the two kinds of cluster behind one face, and their teardown.
//! - `command.rs`: the command run against the cluster, signals passed on to it.
//! - [`local_master`]: the per-user records of running clusters' addresses.
//! - [`signals`]: SIGINT, SIGTERM and SIGHUP taken by a thread of their own.
//! - [`strays`]: orphans adopted (a child subreaper), reaped and stopped.

mod cluster;
mod command;
pub mod local_master;
pub mod signals;
pub mod strays;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};

use crate::hosts::{ClockSkew, EmulatedHosts, HostsOptions};
use crate::logs::error_chain;
use crate::{Interrupted, LocalCluster, LocalClusterOptions};
use cluster::{Cluster, stop_cluster};
use signals::{Caught, StopSignals};

/// How long the last sweep may take to stop orphans left under gangctl.
const STRAYS_GRACE: Duration = Duration::from_secs(5);

/// What `gangctl start` was asked for, its command line parsed.
#[derive(Debug, Clone, Default)]
pub struct StartPlan {
    pub mesh: (u32, u32),
    pub max_agents: usize,
    /// Emulated nodes, this many to a process.
    pub emulate: Option<u32>,
    pub mpl: Option<u32>,
    pub quantum_ms: Option<u32>,
    /// The master's default gang mode, by its name (`gang-master --gang-mode`).
    pub gang_mode: Option<String>,
    pub master_args: Vec<String>,
    pub agent_args: Vec<String>,
    /// Emulated hosts: this many.
    pub hosts: Option<u32>,
    pub host_clock_offsets: Vec<i64>,
    pub host_drift_ppm: Vec<f64>,
    pub keep: bool,
    pub dir: Option<PathBuf>,
    pub bin_dir: Option<PathBuf>,
    /// The command to run against the cluster (none: wait for a signal).
    pub command: Vec<String>,
}

impl StartPlan {
    /// The state and logs stay after the cluster stops.
    fn keeps_dir(&self) -> bool {
        self.keep || self.dir.is_some()
    }
}

/// `gangctl start`: the exit code, or the error to print. `signals` were taken over
/// before any thread started, so no signal ends gangctl the default way: each one reaches
/// a loop below, which stops what has started and only then exits.
pub async fn start(plan: StartPlan, mut signals: StopSignals) -> Result<i32, String> {
    // Orphans of anything below us (a rank's child when its agent was killed, a daemon
    // CMD left running) come to us, not to init, and are stopped at the end.
    strays::become_subreaper().map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let starting = spawn_start(&plan, interrupted.clone());
    let (started, mut stopped_by) = wait_started(starting, &mut signals, &interrupted).await;
    let mut cluster = match settle(started, stopped_by, plan.keeps_dir()).await {
        Settled::Up(cluster) => cluster,
        Settled::Over(result) => return result,
    };
    let master = cluster.master_addr();
    let recorded = announce(&cluster, &master, plan.command.is_empty());
    // Orphans that exited are reaped as they come, so they do not pile up as zombies.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let code = match plan.command.split_first() {
        Some((program, rest)) => {
            let watch = command::Watch {
                cluster: &cluster,
                signals: &mut signals,
                stopped_by: &mut stopped_by,
                tick: &mut tick,
            };
            command::run(program, rest, &master, watch).await
        }
        None => wait_for_stop(&mut cluster, &mut signals, &mut tick).await,
    };
    if recorded {
        local_master::remove_if(&master);
    }
    stop_cluster(cluster, plan.keeps_dir()).await;
    sweep_strays();
    Ok(stopped_by.map_or(code, |c| c.exit_code()))
}

/// The master's extra flags: the plan's own settings, then `--master-arg`s.
fn master_args(plan: &StartPlan) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(q) = plan.quantum_ms {
        args.extend(["--quantum-ms".to_string(), q.to_string()]);
    }
    if let Some(g) = &plan.gang_mode {
        args.extend(["--gang-mode".to_string(), g.clone()]);
    }
    args.extend(plan.master_args.iter().cloned());
    args
}

/// The options of a local cluster (no `--hosts`).
fn local_options(plan: &StartPlan, interrupt: Arc<AtomicBool>) -> LocalClusterOptions {
    LocalClusterOptions {
        mpl: plan.mpl,
        master_args: master_args(plan),
        agent_args: plan.agent_args.clone(),
        dir: plan.dir.clone(),
        keep: plan.keep,
        bin_dir: plan.bin_dir.clone(),
        interrupt: Some(interrupt),
        max_agents: plan.max_agents,
        emulate: plan.emulate,
        // Thousands of nodes register with one master on a small machine.
        nodes_up_timeout: if plan.emulate.is_some() {
            Duration::from_secs(600)
        } else {
            LocalClusterOptions::default().nodes_up_timeout
        },
        ..Default::default()
    }
}

/// The options of `k` emulated hosts: the master's settings go in its config file.
fn hosts_options(plan: &StartPlan, k: u32, interrupt: Arc<AtomicBool>) -> HostsOptions {
    let mut opts = HostsOptions {
        hosts: k,
        bin_dir: plan.bin_dir.clone(),
        dir: plan.dir.clone(),
        keep: plan.keep,
        interrupt: Some(interrupt),
        ..Default::default()
    };
    let key = |k: &str, v: i64| (k.to_string(), toml::Value::Integer(v));
    let keys = &mut opts.image.master_keys;
    keys.extend(plan.mpl.map(|m| key("mpl", m.into())));
    keys.extend(plan.quantum_ms.map(|q| key("quantum_ms", q.into())));
    keys.extend(
        plan.gang_mode
            .clone()
            .map(|g| ("gang_mode".to_string(), toml::Value::String(g))),
    );
    opts.clocks = clock_skews(plan);
    opts
}

/// Each host's clock (`--host-clock-offsets`, `--host-drift-ppm`), if any is set.
fn clock_skews(plan: &StartPlan) -> Option<Vec<ClockSkew>> {
    let n = plan.host_clock_offsets.len().max(plan.host_drift_ppm.len());
    (n > 0).then(|| {
        (0..n)
            .map(|i| ClockSkew {
                offset_ns: plan.host_clock_offsets.get(i).copied().unwrap_or(0),
                drift_ppm: plan.host_drift_ppm.get(i).copied().unwrap_or(0.0),
            })
            .collect()
    })
}

/// Start the cluster on a blocking thread (the start blocks until every node is up).
fn spawn_start(
    plan: &StartPlan,
    interrupt: Arc<AtomicBool>,
) -> JoinHandle<anyhow::Result<Cluster>> {
    let mesh = plan.mesh;
    match plan.hosts {
        None => {
            let opts = local_options(plan, interrupt);
            tokio::task::spawn_blocking(move || {
                LocalCluster::start(mesh, opts).map(|c| Cluster::Local(Box::new(c)))
            })
        }
        Some(k) => {
            let opts = hosts_options(plan, k, interrupt);
            tokio::task::spawn_blocking(move || {
                EmulatedHosts::start(mesh, opts).map(|c| Cluster::Hosts(Box::new(c)))
            })
        }
    }
}

type StartResult = Result<anyhow::Result<Cluster>, JoinError>;

/// Wait for the start to end; a signal meanwhile interrupts it. The first signal is
/// returned too.
async fn wait_started(
    mut starting: JoinHandle<anyhow::Result<Cluster>>,
    signals: &mut StopSignals,
    interrupted: &AtomicBool,
) -> (StartResult, Option<Caught>) {
    let mut stopped_by: Option<Caught> = None;
    loop {
        tokio::select! {
            r = &mut starting => return (r, stopped_by),
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
    }
}

/// How a start ended: a cluster to run, or `gangctl start` is over already.
enum Settled {
    Up(Cluster),
    Over(Result<i32, String>),
}

/// A start that failed or was stopped by a signal ends `gangctl start`, after a sweep.
async fn settle(started: StartResult, stopped_by: Option<Caught>, keep: bool) -> Settled {
    let over = match (started, stopped_by) {
        (Ok(Ok(cluster)), None) => return Settled::Up(cluster),
        (Ok(Ok(cluster)), Some(c)) => {
            // The signal came as the cluster finished starting.
            stop_cluster(cluster, keep).await;
            Ok(c.exit_code())
        }
        (Ok(Err(e)), Some(c)) => {
            match e.downcast_ref::<Interrupted>() {
                Some(Interrupted {
                    kept_dir: Some(dir),
                }) => eprintln!("gangctl: state and logs kept in {}", dir.display()),
                Some(_) => {}
                None => eprintln!("gangctl: {}", error_chain(e.as_ref())),
            }
            Ok(c.exit_code())
        }
        (Ok(Err(e)), None) => Err(error_chain(e.as_ref())),
        (Err(e), _) => Err(format!("starting the cluster: {e}")),
    };
    sweep_strays();
    Settled::Over(over)
}

/// Say where the cluster is, and record its address for other shells: whether it was.
fn announce(cluster: &Cluster, master: &str, no_command: bool) -> bool {
    eprintln!("gangctl: {}", cluster.describe());
    // Other terminals find this cluster with nothing set (see local_master).
    let recorded = match local_master::write(master, &cluster.dir(), cluster.mesh()) {
        Ok(path) => {
            eprintln!("gangctl: address written to {}", path.display());
            true
        }
        Err(e) => {
            eprintln!("gangctl: cannot record the address for other shells: {e}");
            false
        }
    };
    if no_command {
        // On stdout, for `eval`; CMD's stdout is its own, so with CMD it goes to stderr.
        println!("export GANG_MASTER={master}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    } else {
        eprintln!("export GANG_MASTER={master}");
    }
    recorded
}

/// No command: run until a signal (exit 0) or until a process of the cluster dies (1).
async fn wait_for_stop(
    cluster: &mut Cluster,
    signals: &mut StopSignals,
    tick: &mut tokio::time::Interval,
) -> i32 {
    eprintln!("gangctl: Ctrl-C to stop the cluster");
    loop {
        tokio::select! {
            // Stopping the cluster is what it waits for: exit 0.
            c = signals.recv() => {
                eprintln!("gangctl: {}: stopping the cluster", c.signal);
                return 0;
            }
            _ = tick.tick() => {
                if let Err(e) = cluster.check_alive() {
                    eprintln!("gangctl: {e}");
                    return 1;
                }
                strays::reap_exited(&cluster.pids());
            }
        }
    }
}

/// Stop whatever is left below us once the cluster and CMD are reaped.
fn sweep_strays() {
    let n = strays::stop_all(STRAYS_GRACE);
    if n > 0 {
        eprintln!("gangctl: killed {n} leftover process(es) started under the cluster or CMD");
    }
}
