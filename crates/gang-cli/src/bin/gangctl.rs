//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, cancel, drain), or
//! start a whole local cluster.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gang_cli::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::output::{
    CancelledView, JobView, JobsView, MatrixView, NodeView, NodesView, OutputMode, View,
};
use gang_cli::parse::{parse_mesh, parse_node};
use gang_cli::{LocalCluster, LocalClusterOptions};
use gang_proto::v1::{
    CancelRequest, GetJobRequest, GetMatrixRequest, JobState, ListJobsRequest, ListNodesRequest,
    NodeRequest,
};
use tokio::signal::unix::{SignalKind, signal};

/// Look at and steer the gang cluster, or start a local one.
///
/// The master is found with --master or GANG_MASTER (default http://127.0.0.1:7470).
/// Results print as text, or as JSON with --output json (or GANG_OUTPUT=json).
#[derive(Debug, Parser)]
#[command(
    name = "gangctl",
    version,
    after_help = "Exit status: 0 on success, 1 on errors (printed as \"gangctl: ...\"), 2 for usage errors;\n`gangctl start -- CMD` exits with CMD's status."
)]
struct Cli {
    /// Master address (host:port or http://host:port); else the client config file's
    /// `master` ($GANG_CONFIG, ~/.config/gang/client.toml, /etc/gang/client.toml); else
    /// http://127.0.0.1:7470.
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
    #[command(
        after_help = "Examples:\n  gangctl start --mesh 4x4\n  gangctl start --mesh 2x2 --mpl 2 -- prun -n 4 hostname"
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

    /// List the nodes of the mesh: state, agent address, jobs, clock offset.
    Nodes,

    /// Show the slice matrix: which job holds which node in each slice, and the queue.
    ///
    /// Each slice is drawn as a grid, row y=H-1 at the top and x=0 at the left; a cell is
    /// the id of the job on that node ("." if free); "*" marks a multiple-task slot (a job
    /// running in a slice besides its home slice).
    Slices {
        /// Redraw every interval until Ctrl-C (with --output json: one JSON line each time).
        #[arg(short, long)]
        watch: bool,
        /// Redraw interval for --watch, in milliseconds.
        #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u64).range(10..))]
        interval_ms: u64,
    },

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
}

#[derive(Debug, Args)]
struct StartArgs {
    /// The mesh, as WxH (e.g. 4x4): one agent process per node.
    #[arg(long, value_name = "WxH", value_parser = parse_mesh)]
    mesh: (u32, u32),

    /// Slices of the Ousterhout matrix (multiprogramming level); default: the master's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    mpl: Option<u32>,

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
    let code = match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gangctl: {e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

fn print<V: View>(mode: OutputMode, view: &V) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(mode.render(view).as_bytes());
    let _ = out.flush();
}

async fn run(cli: Cli) -> Result<i32, CliError> {
    let mode = cli.output;
    // `start` makes its own cluster and needs no address.
    let master = match &cli.command {
        Cmd::Start(_) => String::new(),
        _ => connect::normalize_addr(&client_config::master(cli.master.clone())?),
    };
    match cli.command {
        Cmd::Start(args) => start(args).await,
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
            print(mode, &JobsView(&jobs));
            Ok(0)
        }
        Cmd::Job { id } => {
            let mut client = connect::job_client(&master).await?;
            let job = client
                .get_job(GetJobRequest { job_id: id })
                .await?
                .into_inner();
            print(mode, &JobView(&job));
            Ok(0)
        }
        Cmd::Cancel { ids } => {
            let mut client = connect::job_client(&master).await?;
            let uid = nix::unistd::getuid().as_raw();
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
            print(mode, &CancelledView(&cancelled));
            Ok(if failed { 1 } else { 0 })
        }
        Cmd::Nodes => {
            let mut client = connect::admin_client(&master).await?;
            let nodes = client.list_nodes(ListNodesRequest {}).await?.into_inner();
            print(mode, &NodesView(&nodes));
            Ok(0)
        }
        Cmd::Slices { watch, interval_ms } => {
            let mut client = connect::admin_client(&master).await?;
            if !watch {
                let m = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
                print(mode, &MatrixView(&m));
                return Ok(0);
            }
            let mut ticker = tokio::time::interval(Duration::from_millis(interval_ms));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let ctrl_c = tokio::signal::ctrl_c();
            tokio::pin!(ctrl_c);
            loop {
                tokio::select! {
                    _ = &mut ctrl_c => return Ok(0),
                    _ = ticker.tick() => {
                        let m = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
                        let text = match mode {
                            OutputMode::Cli => format!(
                                "\x1b[H\x1b[2J{master} every {interval_ms} ms (Ctrl-C to stop)\n\n{}",
                                mode.render(&MatrixView(&m))
                            ),
                            OutputMode::Json => mode.render_compact(&MatrixView(&m)),
                        };
                        let mut out = std::io::stdout().lock();
                        if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
                            return Ok(0); // the reader went away
                        }
                    }
                }
            }
        }
        Cmd::Drain { node: (x, y) } => {
            let mut client = connect::admin_client(&master).await?;
            let node = client
                .drain(NodeRequest { x, y })
                .await?
                .into_inner()
                .node
                .unwrap_or_default();
            print(mode, &NodeView(&node));
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
            print(mode, &NodeView(&node));
            Ok(0)
        }
    }
}

/// `gangctl start`.
async fn start(args: StartArgs) -> Result<i32, CliError> {
    let io = |e: std::io::Error| CliError::other(format!("cannot install signal handlers: {e}"));
    // Installed first: from now on Ctrl-C and SIGTERM reach us as events, and whatever
    // has started is torn down.
    let mut sigint = signal(SignalKind::interrupt()).map_err(io)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io)?;

    let (w, h) = args.mesh;
    let interrupted = Arc::new(AtomicBool::new(false));
    let opts = LocalClusterOptions {
        mpl: args.mpl,
        dir: args.dir.clone(),
        keep: args.keep,
        bin_dir: args.bin_dir.clone(),
        interrupt: Some(interrupted.clone()),
        ..Default::default()
    };
    let mut starting = tokio::task::spawn_blocking(move || LocalCluster::start((w, h), opts));
    let started = loop {
        tokio::select! {
            r = &mut starting => break r,
            _ = sigint.recv() => interrupted.store(true, Ordering::SeqCst),
            _ = sigterm.recv() => interrupted.store(true, Ordering::SeqCst),
        }
    };
    let mut cluster = started
        .map_err(|e| CliError::other(format!("starting the cluster: {e}")))?
        .map_err(|e| CliError::other(format!("{e:#}")))?;
    if interrupted.load(Ordering::SeqCst) {
        // The signal came as the cluster finished starting.
        let _ = tokio::task::spawn_blocking(move || cluster.shutdown()).await;
        return Err(CliError::other("interrupted"));
    }

    let master = cluster.master_addr().to_string();
    eprintln!(
        "gangctl: cluster up: {w}x{h} mesh, master at {master}, metrics at {}, logs in {}",
        cluster.metrics_url(),
        cluster.dir().display()
    );
    eprintln!("export GANG_MASTER={master}");

    let mut code = 0;
    if let Some((program, rest)) = args.command.split_first() {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(rest).env("GANG_MASTER", &master);
        // prun and gangctl (next to this executable) come first in the command's PATH.
        if let Some(path) = path_with_our_dir() {
            cmd.env("PATH", path);
        }
        match cmd.spawn() {
            Err(e) => {
                eprintln!("gangctl: cannot run {program}: {e}");
                code = 127;
            }
            Ok(mut child) => {
                code = loop {
                    tokio::select! {
                        status = child.wait() => break match status {
                            Ok(s) => exit_code(s),
                            Err(e) => { eprintln!("gangctl: waiting for {program}: {e}"); 1 }
                        },
                        // The terminal sent Ctrl-C to the command too; it decides.
                        _ = sigint.recv() => {}
                        _ = sigterm.recv() => {
                            if let Some(pid) = child.id() {
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    nix::sys::signal::Signal::SIGTERM,
                                );
                            }
                        }
                    }
                };
            }
        }
    } else {
        eprintln!("gangctl: Ctrl-C to stop the cluster");
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                _ = check.tick() => {
                    if let Err(e) = cluster.check_alive() {
                        eprintln!("gangctl: {e:#}");
                        code = 1;
                        break;
                    }
                }
            }
        }
        eprintln!("gangctl: stopping the cluster");
    }

    let dir = cluster.dir().to_path_buf();
    let keep = args.keep || args.dir.is_some();
    match tokio::task::spawn_blocking(move || cluster.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("gangctl: stopping the cluster: {e:#}"),
        Err(e) => eprintln!("gangctl: stopping the cluster: {e}"),
    }
    if keep {
        eprintln!("gangctl: state and logs kept in {}", dir.display());
    }
    Ok(code)
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
