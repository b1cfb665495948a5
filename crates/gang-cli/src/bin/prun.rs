//! `prun`: run a parallel job on the gang cluster, relay its stdio, return its exit code.

use std::io::Write;

use clap::Parser;
use gang_cli::attach::{self, AttachOptions, OnSignal};
use gang_cli::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::gang_mode;
use gang_cli::parse::{parse_duration, parse_timeout};
use gang_core::{GangMode, Request, Shape};
use gang_proto::v1::{DeadlockPolicy, JobSpec, ListNodesRequest, MsgContext, SubmitRequest};

/// Run a parallel job on the gang cluster.
///
/// prun submits CMD as a job of SHAPE nodes, relays every rank's stdout and stderr (and
/// our stdin to rank 0) until the job ends, and exits with the job's exit code: the first
/// failing rank's code, or 128+signal, naming that rank on stderr. Ctrl-C, SIGTERM or
/// SIGHUP cancel the job (a second one leaves at once).
#[derive(Debug, Parser)]
#[command(
    name = "prun",
    version,
    after_help = "Examples:\n  prun -n 4x2 -- ./a.out --size 100\n  prun -N4 -t5m -J solver ./a.out    # srun's spellings work too\n  prun -n 8 --label hostname\n  prun -n 2x2 --detach --time-limit 10m -- ./long-job\n  prun -n 4x4 --gang priority -- ./solver\n  prun -n 4x4 -o %j-%r.out -- ./solver    # output to files, as sbatch -o\n\nExit status: the job's exit code; 1 if it could not run (or prun failed); 143 if it\nwas cancelled without one; 130 on a second Ctrl-C; 2 for usage errors."
)]
struct Args {
    /// Nodes: a submesh as WxH (e.g. 4x2) or a node count (e.g. 8); the master rounds a
    /// count to a shape and may rotate a submesh. One rank runs on each node, so srun's
    /// -N, --ntasks and --nodes say the same here.
    #[arg(
        short = 'n',
        long = "nodes",
        short_alias = 'N',
        alias = "ntasks",
        value_name = "SHAPE"
    )]
    nodes: String,

    /// Prefix every output line with the rank that wrote it ("3: hello").
    #[arg(short = 'l', long)]
    label: bool,

    /// Submit, print the job id and exit; the job runs with its stdin on /dev/null.
    #[arg(short = 'd', long)]
    detach: bool,

    /// Cancel the job after it has run this long (it ends as `timeout`, prun exits 124):
    /// Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (a bare number is minutes),
    /// or with units: 90s, 5m, 5min, 2h, 1d, 1h30m.
    #[arg(short = 't', long, alias = "time", value_name = "DURATION", value_parser = parse_duration)]
    time_limit: Option<u64>,

    /// Refuse a node count that is not a rectangle of the mesh (-n 5 would run on 6, as
    /// 3x2) instead of rounding it up; without it prun says when it rounds.
    #[arg(long)]
    exact: bool,

    /// How the job is switched out of its time slices when the cluster time-shares the
    /// mesh; default: the cluster's (gang-master --gang-mode).
    #[arg(long, env = "GANG_MODE", value_name = "MODE", value_parser = gang_mode::parser())]
    gang: Option<GangMode>,

    /// What the master does if the job deadlocks (every rank blocked in a receive of the
    /// messaging library, nothing in flight): report (print it here, keep running) or kill
    /// (report, then fail the job); default: the cluster's (gang-master --on-deadlock).
    #[arg(long, value_name = "POLICY", value_parser = ["report", "kill"])]
    on_deadlock: Option<String>,

    /// How the messaging library keeps the job's network context across switches:
    /// resident (each job keeps its own; a switch flips a flag) or save-restore (copied
    /// out of the transport at switch-out and back in at switch-in) [default: resident].
    #[arg(long, value_name = "MODE", value_parser = ["resident", "save-restore"])]
    context: Option<String>,

    /// What the agents serve MPI libraries to find their peers: auto (the simple protocol,
    /// and a PMIx server for a program linked with Open MPI or a script: both MPIs run
    /// right; an Open MPI program on an agent without PMIx is refused), pmi1 or pmi2 (the
    /// simple wire protocol, PMI_FD: MPICH), pmix (a PMIx server: Open MPI; the simple
    /// protocol too) or none (ranks start as MPI singletons) [default: the cluster's, auto
    /// unless its admin chose another].
    #[arg(long, value_name = "IFACE", value_parser = ["auto", "pmi1", "pmi2", "pmix", "none"])]
    mpi: Option<String>,

    /// Check an MPI program for deadlock: preload a PMPI interposition library into every
    /// rank that reports blocked receives and message counts, so a deadlock is flagged
    /// (see --on-deadlock) as for programs using the messaging library.
    #[arg(long)]
    mpi_check: bool,

    /// Name shown by `gangctl jobs` (default: the command).
    #[arg(short = 'J', long, alias = "job-name")]
    name: Option<String>,

    /// The directory the ranks start in, on every node [default: the current directory].
    /// A relative one is taken from the current directory.
    #[arg(short = 'D', long, value_name = "DIR")]
    chdir: Option<std::path::PathBuf>,

    /// Master address: unix:PATH (its socket on a cluster host) or https://HOST:PORT (with
    /// the cluster CA and a token or user certificate, see the client config); else the
    /// client config file's `master` ($GANG_CONFIG, ~/.config/gang/client.toml,
    /// /etc/gang/client.toml); else unix:/run/gang/master.sock.
    #[arg(long, env = "GANG_MASTER", value_name = "ADDR")]
    master: Option<String>,

    /// Say when the job starts (and more on stderr). Without it prun still says why a job
    /// waits if it is queued for more than a second, and when it starts then.
    #[arg(short = 'v', long)]
    verbose: bool,

    /// Do not print the line that names the failing rank, its node and its exit code or
    /// signal ("prun: rank 2 on node (0,1) exited with code 3"); the exit status says it.
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    quiet: bool,

    /// Write the ranks' stdout (and stderr, unless --error) to files instead of the
    /// terminal, as sbatch -o: %j is the job id, %r the rank, %n the node (X-Y), %% a %;
    /// relative to the current directory. Each rank's agent opens it on the rank's node,
    /// as you. A file several ranks share (no %r) is appended to; one per rank starts
    /// empty.
    #[arg(short = 'o', long, value_name = "PATTERN", value_parser = parse_pattern)]
    output: Option<String>,

    /// Write the ranks' stderr to files (the same patterns as --output).
    #[arg(short = 'e', long, value_name = "PATTERN", value_parser = parse_pattern)]
    error: Option<String>,

    /// How long the master may take to accept the connection and to answer each request
    /// (the job's output streams for as long as it runs); a bare number is seconds; 0: wait forever [default: 10s].
    #[arg(long, env = "GANG_TIMEOUT", value_name = "DURATION", value_parser = parse_timeout)]
    timeout: Option<u64>,

    /// The program to run on every node (looked up in PATH there) and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        num_args = 1..
    )]
    command: Vec<String>,
}

/// An --output/--error pattern, refused here as the master would refuse it.
fn parse_pattern(s: &str) -> Result<String, String> {
    gang_core::output_pattern::validate(s)?;
    Ok(s.to_string())
}

fn main() {
    gang_proto::memory::keep_freed_memory();
    let args: Args = gang_cli::usage::parse_or_exit("prun");
    if let Some(t) = args.timeout {
        gang_cli::timeouts::set_limit(std::time::Duration::from_secs(t));
    }
    if args.command.first().is_none_or(|c| c.is_empty()) {
        use clap::CommandFactory;
        Args::command()
            .error(clap::error::ErrorKind::InvalidValue, "the command is empty")
            .exit();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prun: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(run(args));
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Exit here: the stdin thread may sit in a blocking read.
    std::process::exit(code);
}

async fn run(args: Args) -> i32 {
    match submit_and_attach(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("prun: {e}");
            1
        }
    }
}

async fn submit_and_attach(args: Args) -> Result<i32, CliError> {
    let master = client_config::master(args.master.clone())?;
    let here = std::env::current_dir()
        .map_err(|e| CliError::other(format!("cannot get the current directory: {e}")))?;
    let cwd = match &args.chdir {
        Some(dir) => here.join(dir),
        None => here,
    };
    let cwd = cwd
        .to_str()
        .ok_or_else(|| {
            CliError::other(format!(
                "the current directory {} is not UTF-8",
                cwd.display()
            ))
        })?
        .to_string();
    // The proto carries strings: variables that are not UTF-8 are left out.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let asked_count = match args.nodes.trim().parse::<Request>() {
        Ok(Request::Nodes(n)) => Some(n),
        _ => None,
    };
    if args.exact
        && let Some(n) = asked_count
    {
        refuse_rounding(&master, n).await?;
    }
    let stdin = !args.detach && attach::stdin_is_useful();
    let spec = JobSpec {
        shape: args.nodes.clone(),
        argv: args.command.clone(),
        cwd,
        env,
        time_limit_s: args.time_limit.unwrap_or(0),
        stdin,
        name: args.name.clone().unwrap_or_default(),
        gang: gang_mode::to_proto(args.gang) as i32,
        on_deadlock: match args.on_deadlock.as_deref() {
            Some("kill") => DeadlockPolicy::Kill,
            Some(_) => DeadlockPolicy::Report,
            None => DeadlockPolicy::Unspecified,
        } as i32,
        msg_context: match args.context.as_deref() {
            Some("save-restore") => MsgContext::SaveRestore,
            Some(_) => MsgContext::Resident,
            None => MsgContext::Unspecified,
        } as i32,
        mpi: match args.mpi.as_deref() {
            Some("auto") => gang_proto::v1::Mpi::Auto,
            Some("none") => gang_proto::v1::Mpi::None,
            Some("pmi2") => gang_proto::v1::Mpi::Pmi2,
            Some("pmix") => gang_proto::v1::Mpi::Pmix,
            Some(_) => gang_proto::v1::Mpi::Pmi1,
            None => gang_proto::v1::Mpi::Unspecified,
        } as i32,
        mpi_check: args.mpi_check,
        output: args.output.clone().unwrap_or_default(),
        error: args.error.clone().unwrap_or_default(),
    };
    // Who we are comes from the connection (the socket's peer credentials, a user
    // certificate or a token), never from the request.
    // A token makes the submission safe to retry: if the master saved the job but its
    // answer was lost, the retry returns that job instead of making a second.
    let request = SubmitRequest {
        spec: Some(spec),
        client_token: connect::new_client_token()?,
        ..Default::default()
    };

    let mut signals = if args.detach {
        None
    } else {
        Some(
            attach::Signals::install()
                .map_err(|e| CliError::other(format!("cannot install signal handlers: {e}")))?,
        )
    };
    // A signal now cannot cancel a job whose id we do not know yet: the job is cancelled
    // as soon as the master answers (within --timeout), and a second signal leaves at once.
    let submit = connect::submit_with_retries(&master, request);
    tokio::pin!(submit);
    let mut interrupted = false;
    let submitted = loop {
        let signal = async {
            match signals.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = &mut submit => break r,
            _ = signal => {
                if interrupted {
                    eprintln!("prun: left before the master answered; if it made the job, `gangctl jobs` shows it");
                    return Ok(130);
                }
                interrupted = true;
                eprintln!("prun: cancelling the job as soon as the master answers (again to leave now)");
            }
        }
    };
    let job = submitted?
        .ok_or_else(|| CliError::other("the master accepted the job but did not say its id"))?;

    if let Some(n) = asked_count
        && u64::from(job.w) * u64::from(job.h) > n
    {
        eprintln!(
            "prun: {n} nodes asked; jobs are rectangles, so job {} runs on {} ({}x{}); \
             --exact refuses this",
            job.id,
            u64::from(job.w) * u64::from(job.h),
            job.w,
            job.h
        );
    }
    if args.detach {
        println!("{}", job.id);
        return Ok(0);
    }
    if args.verbose {
        eprintln!(
            "prun: job {} submitted ({}, gang mode {})",
            job.id,
            job.state().label(),
            gang_mode::label(job.gang())
        );
    }
    if args.verbose
        && let Some(note) = attach::files_note(&job)
    {
        eprintln!("prun: job {}: {note}", job.id);
    }
    // Says why the job waits if it is still queued after a second (unless -q).
    let said_queued = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queue_note = (!args.quiet && job.state() == gang_proto::v1::JobState::Queued)
        .then(|| gang_cli::queue_note::spawn("prun", master.clone(), job.id, said_queued.clone()));
    let code = attach::run(
        AttachOptions {
            prog: "prun",
            master: master.clone(),
            job_id: job.id,
            uid: 0,
            stdin,
            label: args.label,
            verbose: args.verbose,
            quiet: args.quiet,
            on_signal: OnSignal::Cancel,
            cancel_now: interrupted,
            said_queued: Some(said_queued),
        },
        signals.expect("installed when attaching"),
    )
    .await;
    if let Some(task) = queue_note {
        task.abort();
    }
    Ok(code)
}

/// `--exact`: refuse a count the master would round up. The mesh comes from the master and
/// the shape from the same function it resolves counts with, so the answer is its own.
async fn refuse_rounding(master: &str, n: u64) -> Result<(), CliError> {
    let mut admin = connect::admin_client(master).await?;
    let nodes = admin.list_nodes(ListNodesRequest {}).await?.into_inner();
    let mesh = Shape::new(nodes.mesh_w, nodes.mesh_h);
    // A count that never fits is the master's to refuse, with its own message.
    let Ok(shape) = Request::Nodes(n).resolve(mesh) else {
        return Ok(());
    };
    if shape.area() == n {
        return Ok(());
    }
    Err(CliError::other(format!(
        "{n} nodes asked; jobs are rectangles, so {n} would run on {} ({shape}); drop --exact \
         to accept",
        shape.area()
    )))
}
