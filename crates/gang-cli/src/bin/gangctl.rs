//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, stats, cancel,
//! drain), or start a whole local cluster.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gang_auth::PeerName;
use gang_cli::certs;
use gang_cli::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::output::OutputMode;
use gang_cli::output::views::{
    CancelledView, JobView, JobsView, MatrixView, NodeView, NodesView, StatsView,
};
use gang_cli::parse::{parse_duration, parse_mesh, parse_node};
use gang_cli::signals::{StopSignals, catch_stop_signals};
use gang_local::check_mesh;
use gang_proto::v1::{
    CancelRequest, GetJobRequest, GetMatrixRequest, GetStatsRequest, JobState, ListJobsRequest,
    ListNodesRequest, NodeRequest,
};

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

    /// How long the master may take to accept the connection and to answer each request
    /// (streams such as attach run as long as the job does); 0: wait forever [default: 10s].
    #[arg(long, global = true, env = "GANG_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<u64>,

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
    Start(gang_cli::start::StartArgs),

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

    /// Follow a job's output until it ends, as prun shows it.
    ///
    /// Everything written so far, then live; exits with the job's exit code and names a
    /// failed rank, as prun. Stdin goes to rank 0 if the job reads it (prun ran it
    /// attached; a job submitted with --detach reads /dev/null). Ctrl-C, SIGTERM or
    /// SIGHUP detach (exit 128+signal); the job runs on.
    #[command(
        after_help = "Examples:\n  prun -n 2x2 --detach -- ./solver   # prints 12\n  gangctl attach 12\n  gangctl attach --label 12"
    )]
    Attach {
        /// The job id.
        #[arg(value_name = "ID")]
        id: u64,
        /// Prefix every output line with the rank that wrote it ("3: hello").
        #[arg(short, long)]
        label: bool,
        /// Say when the job starts and when reattached after a master restart.
        #[arg(short, long)]
        verbose: bool,
        /// Do not print the line that names the failing rank.
        #[arg(short, long, conflicts_with = "verbose")]
        quiet: bool,
    },

    /// Print what a job wrote so far (running or finished) and exit.
    ///
    /// Its stdout to stdout, its stderr to stderr; with --stream, that stream only, on
    /// stdout. Streams written to files (prun --output/--error) are in those files, not
    /// here.
    #[command(
        after_help = "Examples:\n  gangctl output 12\n  gangctl output 12 --rank 3 --stream stderr\n  gangctl output 12 --label | grep error"
    )]
    Output {
        /// The job id.
        #[arg(value_name = "ID")]
        id: u64,
        /// Only this rank's output (0 to the job's size - 1).
        #[arg(short, long, value_name = "N")]
        rank: Option<u32>,
        /// Only this stream, printed on stdout.
        #[arg(short, long, value_name = "STREAM", value_parser = ["stdout", "stderr"])]
        stream: Option<String>,
        /// Prefix every line with the rank that wrote it ("3: hello").
        #[arg(short, long)]
        label: bool,
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
    if let Some(t) = cli.timeout {
        gang_cli::timeouts::set_limit(std::time::Duration::from_secs(t));
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
            Some(signals) => gang_cli::start::start(args, signals).await,
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
                        eprintln!("gangctl: {}", CliError::from(status));
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
            gang_cli::slices_watch::watch_slices(&mut client, mode, &master, interval_ms).await
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
        Cmd::Attach {
            id,
            label,
            verbose,
            quiet,
        } => {
            let flags = gang_cli::job_output::AttachFlags {
                label,
                verbose,
                quiet,
            };
            gang_cli::job_output::attach(&master, id, flags).await
        }
        Cmd::Output {
            id,
            rank,
            stream,
            label,
        } => {
            let filter = gang_cli::job_output::OutputFilter {
                rank,
                stream: stream.map(|s| {
                    if s == "stderr" {
                        gang_cli::relay::Dest::Stderr
                    } else {
                        gang_cli::relay::Dest::Stdout
                    }
                }),
                label,
            };
            gang_cli::job_output::output(&master, id, filter).await
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
