//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, stats, cancel,
//! drain), or start a whole local cluster.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gang_auth::PeerName;
use gang_cli::certs;
use gang_cli::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::job_filter;
use gang_cli::output::OutputMode;
use gang_cli::output::views::ErrorView;
use gang_cli::output::views::{
    JobView, JobsView, MatrixView, NodeView, NodeViews, NodesView, StatsView,
};
use gang_cli::parse::{parse_duration, parse_mesh, parse_node, parse_node_set, parse_timeout};
use gang_cli::signals::{StopSignals, catch_stop_signals};
use gang_cli::tokens;
use gang_local::check_mesh;
use gang_proto::v1::{
    GetJobRequest, GetMatrixRequest, GetStatsRequest, JobState, ListJobsRequest, ListNodesRequest,
    NodeRequest,
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

    /// How to print results: cli (text for people) or json (for programs; errors are then
    /// one {"code","message"} object a line on stderr).
    #[arg(long, global = true, env = "GANG_OUTPUT", value_enum, default_value_t = OutputMode::Cli, value_name = "MODE")]
    output: OutputMode,

    /// How long the master may take to accept the connection and to answer each request
    /// (streams such as attach run as long as the job does); a bare number is seconds; 0: wait forever [default: 10s].
    #[arg(long, global = true, env = "GANG_TIMEOUT", value_name = "DURATION", value_parser = parse_timeout)]
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
    /// The address also goes to a per-user record ($XDG_RUNTIME_DIR/gang/clusters/PID, else
    /// ~/.local/state/gang/clusters/PID; removed when the cluster stops), where prun and
    /// gangctl look when neither --master, GANG_MASTER nor a client config names a master:
    /// the newest running cluster is the default, and stopping it leaves the others
    /// reachable. Without
    /// CMD the export line is printed on stdout (the only line there; messages go to
    /// stderr); with CMD, whose stdout is its own, on stderr.
    ///
    /// Every node is a process on this machine: a mesh of more than --max-agents nodes
    /// (64) is refused. SIGINT, SIGTERM or SIGHUP at any moment stop everything that was
    /// started (a Ctrl-C at the terminal while CMD runs is CMD's to handle).
    #[command(
        after_help = "Examples:\n  gangctl start --mesh 4x4\n  gangctl start --mesh 2x2 --mpl 2 -- prun -n 4 hostname\n  gangctl start --mesh 4x4 --mpl 2 --quantum-ms 100 --gang-mode priority\n  gangctl start --mesh 2x2 --agent-arg=--clock --agent-arg=host\n  gangctl start --mesh 10x10 --max-agents 100"
    )]
    Start(gang_cli::start::StartArgs),

    /// List jobs: by default the queued, starting and running ones, newest first; with
    /// job ids, --state or --since, finished ones too (as sacct).
    ///
    /// A queued job's SUBMESH(REASON) says why it waits, as squeue's NODELIST(REASON):
    /// (waiting for node (1,0): drained), (priority): another job is ahead of it,
    /// (resources): it is next and nothing free fits it now.
    #[command(
        after_help = "Examples:\n  gangctl jobs 12\n  gangctl jobs 3,5-9\n  gangctl jobs last\n  gangctl jobs --user alice --state running,PD\n  gangctl jobs --since 1h\n  gangctl jobs --since 2024-05-01T12:00"
    )]
    Jobs {
        /// Only these jobs: ids and ranges, comma-separated (3,5-9), or `last` (your
        /// newest job). An id that does not exist is an error; a range skips missing ids.
        #[arg(value_name = "IDS|RANGES|last")]
        ids: Vec<String>,
        /// Also finished jobs (completed, failed, cancelled, timeout).
        #[arg(short, long)]
        all: bool,
        /// Only jobs of this user (a name or a uid).
        #[arg(short, long, value_name = "USER")]
        user: Option<String>,
        /// Only jobs in these states, comma-separated: queued (PD), starting (CF), running
        /// (R), completed (CD), failed (F), cancelled (CA), timeout (TO), or active.
        #[arg(short, long, value_name = "S,...", value_parser = job_filter::parse_state_set)]
        state: Option<job_filter::States>,
        /// Only jobs submitted since T: a duration ago (1h, 30m, 2-00) or a UTC time
        /// (YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS]) or RFC 3339 (2024-05-01T12:00:00+02:00).
        #[arg(long, value_name = "T", value_parser = since_now)]
        since: Option<i64>,
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

    /// Cancel jobs (their ranks get SIGTERM, then SIGKILL after a grace), as scancel: by
    /// ids and ranges, and/or every active job of --user or in --state (all must match).
    ///
    /// Prints `cancelled N` for a job that ended at once (it was queued), `cancelling N:
    /// its ranks are being stopped` for a placed one. A job named by its id that has
    /// already ended is refused (`job N already completed`); the other jobs are still
    /// cancelled, and the exit status is then 1. A range skips ids that do not exist or
    /// have ended.
    #[command(
        after_help = "Examples:\n  gangctl cancel 12\n  gangctl cancel 71-75,80\n  gangctl cancel --user alice --state queued\n  gangctl cancel --state PD 100-200"
    )]
    Cancel {
        /// Jobs: ids and ranges, comma-separated (3,5-9).
        #[arg(value_name = "IDS|RANGES")]
        ids: Vec<String>,
        /// Only jobs of this user (a name or a uid).
        #[arg(short, long, value_name = "USER")]
        user: Option<String>,
        /// Only jobs in these states, comma-separated: queued (PD), starting (CF), running
        /// (R).
        #[arg(short, long, value_name = "S,...", value_parser = job_filter::parse_state_set)]
        state: Option<job_filter::States>,
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

    /// Drain nodes: they take no new jobs; running ones finish. One request per node,
    /// each reported (`node X,Y: drained`); a node refused is an error, the others go on.
    #[command(after_help = "Examples:\n  gangctl drain 1,0\n  gangctl drain 0-3,1 '(3,3)'")]
    Drain {
        /// Nodes, as X,Y (e.g. 2,3) or (X,Y), or ranges on either axis: 0-3,1 (x from 0
        /// to 3 at y=1), 0-1,0-1.
        #[arg(value_name = "X,Y", required = true, value_parser = parse_node_set)]
        nodes: Vec<Vec<(u32, u32)>>,
    },

    /// Resume drained nodes: they take new jobs again (nodes as for drain).
    Resume {
        /// Nodes, as X,Y (e.g. 2,3) or (X,Y), or ranges on either axis: 0-3,1 (x from 0
        /// to 3 at y=1), 0-1,0-1.
        #[arg(value_name = "X,Y", required = true, value_parser = parse_node_set)]
        nodes: Vec<Vec<(u32, u32)>>,
    },

    /// The cluster's certificates: mutual TLS between the master and its agents (each
    /// node's certificate names its coordinate), and user certificates for remote clients.
    #[command(subcommand)]
    Certs(CertsCmd),

    /// Get a token to reach the master from elsewhere (over TLS). Run it on a cluster host:
    /// the master's Unix socket tells it who you are. Prints the token, or with --save
    /// keeps it in ~/.config/gang/token (mode 0600), where prun and gangctl find it, and
    /// prints its id.
    ///
    /// A token names you only: the master looks you up at every use (your groups then; a
    /// deleted account's tokens are refused). `gangctl token revoke` ends tokens early.
    #[command(args_conflicts_with_subcommands = true)]
    Token {
        /// How long it is valid: 90s, 30m, 12h, 1d (default: the master's, 1h; at most
        /// its limit, 24h).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        ttl: Option<u64>,
        #[arg(long)]
        save: bool,
        #[command(subcommand)]
        revoke: Option<TokenCmd>,
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
enum TokenCmd {
    /// Revoke tokens, at once and across restarts of the master: a token you hold (`-`:
    /// read it from stdin), one by its id (admins; the master logs each token's id, user
    /// and expiry when it issues it), or every token of a user issued until now (that
    /// user, or an admin). Works on the socket and over TLS.
    #[command(
        group(clap::ArgGroup::new("what").required(true).args(["token", "id", "user"])),
        after_help = "Examples:\n  gangctl token revoke - < ~/.config/gang/token\n  gangctl token revoke --user alice\n  gangctl token revoke --id 3f0c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"
    )]
    Revoke {
        /// The token (as `gangctl token` printed it), or `-` to read it from stdin.
        #[arg(value_name = "TOKEN")]
        token: Option<String>,
        /// The id of the token to revoke (32 hex digits).
        #[arg(long)]
        id: Option<String>,
        /// Revoke every token of this user issued until now.
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
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

/// Whether the command line or GANG_OUTPUT asks for JSON, read by hand when clap refused
/// the command line (and so gave no `Cli`).
fn json_requested() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|w| w[0] == "--output" && w[1] == "json")
        || args.iter().any(|a| a == "--output=json")
        || std::env::var("GANG_OUTPUT").is_ok_and(|v| v == "json")
}

/// clap's own exit, but a usage error under `--output json` is a JSON object too (exit 2).
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if help || !json_requested() {
        e.exit()
    }
    // clap's first line names the problem; the rest is usage text for people.
    let text = e.render().to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    OutputMode::Json.eprint(&ErrorView {
        prog: "gangctl",
        code: "USAGE",
        message,
    });
    std::process::exit(2)
}

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    let mode = cli.output;
    let mut signals = None;
    if let Cmd::Start(args) = &cli.command {
        // Before anything is started, or even looked for.
        let refused = match args.emulate {
            Some(per) => gang_local::check_emulated(args.mesh, per).err(),
            None => check_mesh(args.mesh, args.max_agents)
                .err()
                .map(|e| e.message("--max-agents")),
        };
        if let Some(message) = refused {
            mode.eprint(&ErrorView {
                prog: "gangctl",
                code: "USAGE",
                message,
            });
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
            mode.eprint(&ErrorView::of("gangctl", &e));
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
        Cmd::Jobs {
            ids,
            all,
            user,
            state,
            since,
            limit,
        } => {
            let sel = job_filter::parse_job_sel(&ids).unwrap_or_else(|e| {
                use clap::CommandFactory;
                Cli::command()
                    .error(clap::error::ErrorKind::InvalidValue, e)
                    .exit()
            });
            let filter = job_filter::JobFilter {
                sel,
                user,
                since_ns: since,
            };
            list_jobs(&master, mode, filter, state, all, limit).await
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
        Cmd::Cancel { ids, user, state } => {
            let sel = job_filter::parse_job_sel(&ids)
                .and_then(|sel| {
                    let filter = job_filter::JobFilter {
                        sel,
                        user,
                        since_ns: None,
                    };
                    gang_cli::cancel::CancelSel::new(filter, state)
                })
                .unwrap_or_else(|e| {
                    use clap::CommandFactory;
                    Cli::command()
                        .error(clap::error::ErrorKind::InvalidValue, e)
                        .exit()
                });
            gang_cli::cancel::cancel(&master, mode, sel).await
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
        Cmd::Drain { nodes } => set_drained(&master, mode, nodes, true).await,
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
        Cmd::Token {
            ttl,
            save,
            revoke: None,
        } => {
            println!("{}", tokens::token(&master, ttl.unwrap_or(0), save).await?);
            Ok(0)
        }
        Cmd::Token {
            revoke: Some(TokenCmd::Revoke { token, id, user }),
            ..
        } => {
            // The argument group lets exactly one through.
            let what = match (token, id, user) {
                (Some(t), _, _) => tokens::Revoke::Token(t),
                (_, Some(id), _) => tokens::Revoke::Id(id),
                (_, _, Some(u)) => tokens::Revoke::User(u),
                (None, None, None) => {
                    return Err(CliError::other("say what to revoke: TOKEN, --id or --user"));
                }
            };
            println!("{}", tokens::revoke(&master, what).await?);
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
        Cmd::Resume { nodes } => set_drained(&master, mode, nodes, false).await,
    }
}

/// `--since`, against the clock when the command line is read.
fn since_now(s: &str) -> Result<i64, String> {
    job_filter::parse_since(s, now_ns())
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `gangctl jobs` with its filters. States go to the master; ids, user and time are
/// applied to its listing, and named ids it did not list (older than its limit) are
/// fetched one by one.
async fn list_jobs(
    master: &str,
    mode: OutputMode,
    filter: job_filter::JobFilter,
    state: Option<job_filter::States>,
    all: bool,
    limit: u32,
) -> Result<i32, CliError> {
    use job_filter::JobSel;
    // Naming jobs or a time is asking about history, as sacct does: finished ones too.
    let history = all || filter.sel.is_some() || filter.since_ns.is_some();
    let states: Vec<i32> = match state {
        Some(s) => s.0.iter().map(|s| *s as i32).collect(),
        None if history => Vec::new(),
        None => [JobState::Queued, JobState::Starting, JobState::Running]
            .iter()
            .map(|s| *s as i32)
            .collect(),
    };
    let mut client = connect::job_client(master).await?;
    let listed = client
        .list_jobs(ListJobsRequest {
            states: states.clone(),
            limit: if filter.sel == Some(JobSel::Last) {
                1
            } else {
                limit
            },
        })
        .await?
        .into_inner()
        .jobs;
    let mut jobs: Vec<_> = listed
        .into_iter()
        .filter(|j| filter.matches(j) || filter.sel == Some(JobSel::Last))
        .collect();
    let mut failed = false;
    if let Some(JobSel::Ids { single, .. }) = &filter.sel {
        for &id in single {
            if jobs.iter().any(|j| j.id == id) {
                continue;
            }
            match client.get_job(GetJobRequest { job_id: id }).await {
                Ok(r) => {
                    let j = r.into_inner();
                    let state_ok = states.is_empty() || states.contains(&j.state);
                    if state_ok && filter.matches(&j) {
                        jobs.push(j);
                    }
                }
                Err(status) => {
                    eprintln!("gangctl: {}", CliError::Rpc(status));
                    failed = true;
                }
            }
        }
        jobs.sort_by_key(|j| std::cmp::Reverse(j.id));
    }
    mode.print(&JobsView(&jobs));
    Ok(if failed { 1 } else { 0 })
}

/// `drain` / `resume`: one request per node, each reported; a refusal does not stop the
/// others, and makes the exit status 1.
async fn set_drained(
    master: &str,
    mode: OutputMode,
    nodes: Vec<Vec<(u32, u32)>>,
    drain: bool,
) -> Result<i32, CliError> {
    let nodes: Vec<(u32, u32)> = nodes.into_iter().flatten().collect();
    let mut client = connect::admin_client(master).await?;
    let (mut done, mut failed) = (vec![], false);
    for &(x, y) in &nodes {
        let r = if drain {
            client.drain(NodeRequest { x, y }).await
        } else {
            client.resume(NodeRequest { x, y }).await
        };
        match r {
            Ok(r) => done.push(r.into_inner().node.unwrap_or_default()),
            Err(status) => {
                eprintln!("gangctl: node {x},{y}: {}", CliError::Rpc(status));
                failed = true;
            }
        }
    }
    // One node named: one object, as before; several: an array (as `cancel`).
    if nodes.len() == 1 {
        if let Some(n) = done.first() {
            mode.print(&NodeView(n));
        }
    } else {
        mode.print(&NodeViews(&done));
    }
    Ok(if failed { 1 } else { 0 })
}
