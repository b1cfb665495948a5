//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, stats, cancel,
//! drain), or start a whole local cluster.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gang_auth::PeerName;
use gang_cli::certs;
use gang_cli::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::gang_mode;
use gang_cli::matrix_view;
use gang_cli::output::OutputMode;
use gang_cli::output::views::{
    CancelledView, JobView, JobsView, MatrixView, NodeView, NodesView, StatsView,
};
use gang_cli::parse::{parse_duration, parse_max_agents, parse_mesh, parse_node};
use gang_cli::signals::{self, Caught, StopSignals, catch_stop_signals};
use gang_cli::strays;
use gang_core::GangMode;
use gang_local::{DEFAULT_MAX_AGENTS, Interrupted, LocalCluster, LocalClusterOptions, check_mesh};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::{
    CancelRequest, GetJobRequest, GetMatrixRequest, GetStatsRequest, JobState, ListJobsRequest,
    ListNodesRequest, Matrix, NodeRequest,
};
use nix::sys::signal::Signal;
use tokio::time::Instant;

/// Look at and steer the gang cluster, or start a local one.
///
/// The master is found with --master or GANG_MASTER (default: its Unix socket,
/// unix:/run/gang/master.sock).
/// Results print as text, or as JSON with --output json (or GANG_OUTPUT=json).
#[derive(Debug, Parser)]
#[command(
    name = "gangctl",
    version,
    after_help = "Exit status: 0 on success, 1 on errors (printed as \"gangctl: ...\"), 2 for usage errors;\n`gangctl start -- CMD` exits with CMD's status; `gangctl start` stopped by SIGINT, SIGTERM or\nSIGHUP before its cluster is up, or while CMD runs, exits with 128+signal (130, 143, 129)."
)]
struct Cli {
    /// Master address: unix:PATH (its socket on a cluster host) or https://HOST:PORT (with
    /// the cluster CA and a token or user certificate, see the client config); else the
    /// client config file's `master` ($GANG_CONFIG, ~/.config/gang/client.toml,
    /// /etc/gang/client.toml); else unix:/run/gang/master.sock.
    #[arg(long, global = true, env = "GANG_MASTER", value_name = "ADDR")]
    master: Option<String>,

    /// How to print results: cli (text for people) or json (for programs).
    #[arg(long, global = true, env = "GANG_OUTPUT", value_enum, default_value_t = OutputMode::Cli, value_name = "MODE")]
    output: OutputMode,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start a whole cluster on this machine (loopback), like `flux start --test-size`.
    ///
    /// Runs gang-master and one gang-agent per node (binaries next to gangctl), waits until
    /// every node is up, prints `export GANG_MASTER=...`, then runs CMD with GANG_MASTER
    /// set (and gangctl's directory first in PATH, for prun) and tears the cluster down
    /// when it exits (exiting with its status), or, without CMD, waits for Ctrl-C. State
    /// and logs go to a temporary directory, removed at the end unless --keep or --dir.
    ///
    /// Every node is a process on this machine: a mesh of more than --max-agents nodes
    /// (64) is refused. SIGINT, SIGTERM or SIGHUP at any moment stop everything that was
    /// started (a Ctrl-C at the terminal while CMD runs is CMD's to handle).
    #[command(
        after_help = "Examples:\n  gangctl start --mesh 4x4\n  gangctl start --mesh 2x2 --mpl 2 -- prun -n 4 hostname\n  gangctl start --mesh 4x4 --mpl 2 --quantum-ms 100 --gang-mode priority\n  gangctl start --mesh 2x2 --agent-arg=--clock --agent-arg=host\n  gangctl start --mesh 10x10 --max-agents 100"
    )]
    Start(StartArgs),

    /// List jobs: by default the queued, starting and running ones, newest first.
    Jobs {
        /// Also finished jobs (completed, failed, cancelled).
        #[arg(short, long)]
        all: bool,
        /// At most this many jobs (0: the master's limit, 1000).
        #[arg(long, default_value_t = 0, value_name = "N")]
        limit: u32,
    },

    /// Show one job.
    Job {
        /// The job id.
        #[arg(value_name = "ID")]
        id: u64,
    },

    /// Cancel jobs (their ranks get SIGTERM, then SIGKILL after a grace).
    Cancel {
        /// Job ids.
        #[arg(value_name = "ID", required = true)]
        ids: Vec<u64>,
    },

    /// List the nodes of the mesh: state, agent address, jobs, clock offset from the
    /// master ± its error bound ("host": the agent trusts its host clock), and the newest
    /// slice table version the agent acknowledged.
    Nodes,

    /// Show the slice matrix: which job holds which node in each slice, the slice table in
    /// force (version, quantum, row order), the slice running now, and the queue.
    ///
    /// Each slice is drawn as a grid, row y=H-1 at the top and x=0 at the left; a cell is
    /// the id of the job on that node ("." if free); "*" marks a multiple-task slot (a job
    /// running in a slice besides its home slice). The slice running now is marked
    /// "▶ running".
    Slices {
        /// Redraw until Ctrl-C: the matrix is fetched every interval, and in between the
        /// running slice is moved on at each slot boundary (computed from the table's
        /// epoch and quantum; at most every 100 ms). With --output json: one JSON line per
        /// fetch.
        #[arg(short, long)]
        watch: bool,
        /// How often --watch fetches the matrix, in milliseconds.
        #[arg(long, default_value_t = 500, value_name = "N", value_parser = clap::value_parser!(u64).range(10..))]
        interval_ms: u64,
    },

    /// Gang switching figures over a recent window: co-scheduling skew, switch latency and
    /// switch cost (count, p50, p99, max, mean), switches reported and dropped, and the
    /// slice table version and quantum.
    ///
    /// skew: per slot boundary, the spread of the agents' last-signal times (corrected by
    /// their clock offsets). switch latency: per agent and switch, last signal sent minus
    /// the deadline. switch cost: per agent and switch, last signal minus first signal.
    /// JSON: {"skew":{"count","p50_ns","p99_ns","max_ns","mean_ns"},"switch_latency":{..},
    /// "switch_cost":{..},"switches_reported","switches_dropped","table_version","quantum_ns"}
    /// (integers, nanoseconds).
    Stats,

    /// Drain a node: it takes no new jobs; running ones finish.
    Drain {
        /// The node, as X,Y (e.g. 2,3).
        #[arg(value_name = "X,Y", value_parser = parse_node)]
        node: (u32, u32),
    },

    /// Resume a drained node: it takes new jobs again.
    Resume {
        /// The node, as X,Y (e.g. 2,3).
        #[arg(value_name = "X,Y", value_parser = parse_node)]
        node: (u32, u32),
    },

    /// The cluster's certificates: mutual TLS between the master and its agents (each
    /// node's certificate names its coordinate), and user certificates for remote clients.
    #[command(subcommand)]
    Certs(CertsCmd),

    /// Get a token to reach the master from elsewhere (over TLS). Run it on a cluster host:
    /// the master's Unix socket tells it who you are. Prints the token, or with --save
    /// keeps it in ~/.config/gang/token (mode 0600), where prun and gangctl find it.
    Token {
        /// How long it is valid: 90s, 30m, 12h, 7d (default: the master's, 12h; at most
        /// its limit, 7 days).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        ttl: Option<u64>,
        #[arg(long)]
        save: bool,
    },
}

#[derive(Debug, Subcommand)]
enum CertsCmd {
    /// Make a cluster CA in DIR and certificates for the master and every node.
    #[command(
        after_help = "Then, on each host: the master gets DIR/ca.pem, master.pem, \
        master-key.pem; node X,Y's agent gets DIR/ca.pem and nodes/node-X-Y{,-key}.pem.\n\
        Keep DIR/ca-key.pem offline. See deploy/README.md."
    )]
    Init {
        dir: PathBuf,
        /// The mesh, WxH: one node certificate per node.
        #[arg(long, value_parser = parse_mesh, value_name = "WxH")]
        mesh: (u32, u32),
        /// Validity of the master's and nodes' certificates, in days.
        #[arg(long, default_value_t = gang_auth::pki::DEFAULT_DAYS)]
        days: i64,
    },
    /// Sign a certificate for a user (a remote client) with the CA in --dir.
    User {
        /// The Unix user name the master will know them by.
        name: String,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 365)]
        days: i64,
    },
    /// Sign a (new) certificate for a node with the CA in --dir.
    Node {
        #[arg(value_name = "X,Y", value_parser = parse_node)]
        node: (u32, u32),
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = gang_auth::pki::DEFAULT_DAYS)]
        days: i64,
    },
}

#[derive(Debug, Args)]
struct StartArgs {
    /// The mesh, as WxH (e.g. 4x4): one agent process per node.
    #[arg(long, value_name = "WxH", value_parser = parse_mesh)]
    mesh: (u32, u32),

    /// The most agents (W*H) to start on this machine, at most 1024.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_AGENTS, value_parser = parse_max_agents)]
    max_agents: usize,

    /// Slices of the Ousterhout matrix (multiprogramming level); default: the master's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    mpl: Option<u32>,

    /// Length of a time slot in ms (gang-master --quantum-ms); default: the master's.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=60_000))]
    quantum_ms: Option<u32>,

    /// How jobs that do not choose (prun --gang) are switched (gang-master --gang-mode);
    /// default: the master's.
    #[arg(long, value_name = "MODE", value_parser = gang_mode::parser())]
    gang_mode: Option<GangMode>,

    /// An extra gang-master flag (repeat for each word: --master-arg=--table-lead-ms
    /// --master-arg=40).
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    master_arg: Vec<String>,

    /// An extra flag for every gang-agent (repeat for each word: --agent-arg=--clock
    /// --agent-arg=host).
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    agent_arg: Vec<String>,

    /// Keep the temporary directory (state, logs) after the cluster stops.
    #[arg(long)]
    keep: bool,

    /// Use this directory for state and logs (created if missing, never removed).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Where gang-master and gang-agent are (default: next to gangctl).
    #[arg(long, value_name = "DIR", hide = true)]
    bin_dir: Option<PathBuf>,

    /// Command to run against the cluster (GANG_MASTER set in its environment).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

fn main() {
    let cli = Cli::parse();
    let mut signals = None;
    if let Cmd::Start(args) = &cli.command {
        // Before anything is started, or even looked for.
        if let Err(e) = check_mesh(args.mesh, args.max_agents) {
            eprintln!("gangctl: {}", e.message("--max-agents"));
            std::process::exit(2);
        }
        // Before the runtime or any other thread exists (see gang_cli::signals).
        match catch_stop_signals() {
            Ok(s) => signals = Some(s),
            Err(e) => {
                eprintln!("gangctl: cannot take over SIGINT, SIGTERM and SIGHUP: {e}");
                std::process::exit(1);
            }
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gangctl: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match rt.block_on(run(cli, signals)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gangctl: {e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

async fn run(cli: Cli, signals: Option<StopSignals>) -> Result<i32, CliError> {
    let mode = cli.output;
    // `start` makes its own cluster and `certs` only writes files: neither needs an address.
    let master = match &cli.command {
        Cmd::Start(_) | Cmd::Certs(_) => String::new(),
        _ => client_config::master(cli.master.clone())?,
    };
    match cli.command {
        Cmd::Start(args) => match signals {
            Some(signals) => start(args, signals).await,
            None => Err(CliError::other("gangctl start without its signal thread")),
        },
        Cmd::Jobs { all, limit } => {
            let states = if all {
                Vec::new()
            } else {
                [JobState::Queued, JobState::Starting, JobState::Running]
                    .iter()
                    .map(|s| *s as i32)
                    .collect()
            };
            let mut client = connect::job_client(&master).await?;
            let jobs = client
                .list_jobs(ListJobsRequest { states, limit })
                .await?
                .into_inner()
                .jobs;
            mode.print(&JobsView(&jobs));
            Ok(0)
        }
        Cmd::Job { id } => {
            let mut client = connect::job_client(&master).await?;
            let job = client
                .get_job(GetJobRequest { job_id: id })
                .await?
                .into_inner();
            mode.print(&JobView(&job));
            Ok(0)
        }
        Cmd::Cancel { ids } => {
            let mut client = connect::job_client(&master).await?;
            // The master knows who we are from the connection.
            let uid = 0;
            let mut cancelled = Vec::new();
            let mut failed = false;
            for job_id in ids {
                match client.cancel(CancelRequest { job_id, uid }).await {
                    Ok(resp) => cancelled.push(resp.into_inner().job.unwrap_or_else(|| {
                        gang_proto::v1::JobInfo {
                            id: job_id,
                            ..Default::default()
                        }
                    })),
                    Err(status) => {
                        eprintln!("gangctl: {}", CliError::Rpc(status));
                        failed = true;
                    }
                }
            }
            mode.print(&CancelledView(&cancelled));
            Ok(if failed { 1 } else { 0 })
        }
        Cmd::Nodes => {
            let mut client = connect::admin_client(&master).await?;
            let nodes = client.list_nodes(ListNodesRequest {}).await?.into_inner();
            mode.print(&NodesView(&nodes));
            Ok(0)
        }
        Cmd::Slices { watch, interval_ms } => {
            let mut client = connect::admin_client(&master).await?;
            if !watch {
                let m = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
                mode.print(&MatrixView(&m));
                return Ok(0);
            }
            watch_slices(&mut client, mode, &master, interval_ms).await
        }
        Cmd::Stats => {
            let mut client = connect::admin_client(&master).await?;
            let stats = client.get_stats(GetStatsRequest {}).await?.into_inner();
            mode.print(&StatsView(&stats));
            Ok(0)
        }
        Cmd::Drain { node: (x, y) } => {
            let mut client = connect::admin_client(&master).await?;
            let node = client
                .drain(NodeRequest { x, y })
                .await?
                .into_inner()
                .node
                .unwrap_or_default();
            mode.print(&NodeView(&node));
            Ok(0)
        }
        Cmd::Certs(c) => {
            let lines = match c {
                CertsCmd::Init { dir, mesh, days } => certs::init(&dir, mesh, days)?,
                CertsCmd::User { name, dir, days } => {
                    vec![certs::issue(&dir, &PeerName::User(name), days)?]
                }
                CertsCmd::Node {
                    node: (x, y),
                    dir,
                    days,
                } => vec![certs::issue(&dir, &PeerName::Node { x, y }, days)?],
            };
            for l in lines {
                println!("{l}");
            }
            Ok(0)
        }
        Cmd::Token { ttl, save } => {
            println!("{}", certs::token(&master, ttl.unwrap_or(0), save).await?);
            Ok(0)
        }
        Cmd::Resume { node: (x, y) } => {
            let mut client = connect::admin_client(&master).await?;
            let node = client
                .resume(NodeRequest { x, y })
                .await?
                .into_inner()
                .node
                .unwrap_or_default();
            mode.print(&NodeView(&node));
            Ok(0)
        }
    }
}

/// How long CMD may take to exit after gangctl passed it a signal, before SIGKILL.
const CMD_GRACE: Duration = Duration::from_secs(5);
/// How long the last sweep may take to stop orphans left under gangctl.
const STRAYS_GRACE: Duration = Duration::from_secs(5);

/// `gangctl start`. `signals` were taken over before any thread started, so no signal
/// ends gangctl the default way: each one reaches a loop below, which stops what has
/// started and only then exits.
async fn start(args: StartArgs, mut signals: StopSignals) -> Result<i32, CliError> {
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
    let opts = LocalClusterOptions {
        mpl: args.mpl,
        master_args,
        agent_args: args.agent_arg.clone(),
        dir: args.dir.clone(),
        keep: args.keep,
        bin_dir: args.bin_dir.clone(),
        interrupt: Some(interrupted.clone()),
        max_agents: args.max_agents,
        ..Default::default()
    };
    let mut starting = tokio::task::spawn_blocking(move || LocalCluster::start((w, h), opts));
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

    let master = cluster.master_addr().to_string();
    eprintln!(
        "gangctl: cluster up: {w}x{h} mesh, master at {master}, metrics at {}, logs in {}",
        cluster.metrics_url(),
        cluster.dir().display()
    );
    eprintln!("export GANG_MASTER={master}");

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

    let keep = args.keep || args.dir.is_some();
    stop_cluster(cluster, keep).await;
    sweep_strays();
    Ok(stopped_by.map_or(code, |c| c.exit_code()))
}

/// Tear the cluster down (signals meanwhile wait in their channel: the teardown is
/// bounded by the shutdown grace).
async fn stop_cluster(cluster: LocalCluster, keep: bool) {
    let dir = cluster.dir().to_path_buf();
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

/// The running slice is recomputed at most this often between fetches.
const MIN_REDRAW: Duration = Duration::from_millis(100);

/// A matrix and the local instant matching its `now_ns` on the master clock.
struct Fetched {
    matrix: Matrix,
    at: Instant,
}

impl Fetched {
    /// The master's clock at local instant `t` (extrapolated from the answer).
    fn master_ns(&self, t: Instant) -> i64 {
        let d = if t >= self.at {
            (t - self.at).as_nanos() as i64
        } else {
            -((self.at - t).as_nanos() as i64)
        };
        self.matrix.now_ns + d
    }

    /// The local instant of master time `ns`.
    fn local(&self, ns: i64) -> Instant {
        let d = ns - self.matrix.now_ns;
        if d >= 0 {
            self.at + Duration::from_nanos(d as u64)
        } else {
            self.at
                .checked_sub(Duration::from_nanos(d.unsigned_abs()))
                .unwrap_or(self.at)
        }
    }
}

/// `gangctl slices --watch`.
async fn watch_slices(
    client: &mut AdminServiceClient<gang_proto::client::MasterChannel>,
    mode: OutputMode,
    master: &str,
    interval_ms: u64,
) -> Result<i32, CliError> {
    let interval = Duration::from_millis(interval_ms);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut next_fetch = Instant::now();
    let mut fetched: Option<Fetched> = None;
    // When the text was last computed (drawn or found unchanged).
    let mut last_check = Instant::now();
    let mut last_text = String::new();
    loop {
        // Wake for the next fetch, or (text) for the next slot boundary, if sooner.
        let mut wake = next_fetch;
        if mode == OutputMode::Cli
            && let Some(f) = &fetched
            && let Some(b) =
                matrix_view::next_boundary_after(&f.matrix, f.master_ns(Instant::now()))
        {
            // A little past the boundary, so that the row computed there is the new one.
            let at = (f.local(b) + Duration::from_millis(1)).max(last_check + MIN_REDRAW);
            wake = wake.min(at);
        }
        tokio::select! {
            _ = &mut ctrl_c => return Ok(0),
            _ = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        let mut new_fetch = false;
        if now >= next_fetch {
            let sent = Instant::now();
            let matrix = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
            let received = Instant::now();
            // The master read its clock about halfway through the round trip.
            fetched = Some(Fetched {
                matrix,
                at: sent + (received - sent) / 2,
            });
            next_fetch = (next_fetch + interval).max(received);
            new_fetch = true;
        }
        let Some(f) = &fetched else { continue };
        let text = match mode {
            OutputMode::Json if new_fetch => mode.render_compact(&MatrixView(&f.matrix)),
            OutputMode::Json => continue,
            OutputMode::Cli => {
                last_check = Instant::now();
                let m = matrix_view::at(&f.matrix, f.master_ns(last_check));
                let body = format!(
                    "{master} every {interval_ms} ms (Ctrl-C to stop)\n\n{}",
                    mode.render(&MatrixView(&m))
                );
                if body == last_text {
                    continue;
                }
                let first = last_text.is_empty();
                last_text = body;
                redraw_text(&last_text, first)
            }
        };
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return Ok(0); // the reader went away
        }
    }
}

/// Terminal text that replaces the screen with `body` without flicker: home, each line
/// cleared to its end, then the rest of the screen cleared (the whole screen the first
/// time).
fn redraw_text(body: &str, first: bool) -> String {
    let mut out = String::from(if first { "\x1b[H\x1b[2J" } else { "\x1b[H" });
    for line in body.lines() {
        out.push_str(line);
        out.push_str("\x1b[K\n");
    }
    out.push_str("\x1b[J");
    out
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
