//! `prun`: run a parallel job on the gang cluster, relay its stdio, return its exit code.

use std::io::Write;

use gang_cli::args::gang_mode;
use gang_cli::args::prun::Args;
use gang_cli::connect::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::prun::attach::{self, AttachOptions, OnSignal};
use gang_cli::prun::ends;
use gang_core::{Request, Shape};
use gang_proto::v1::{
    DeadlockPolicy, JobInfo, JobSpec, ListNodesRequest, Mpi, MsgContext, Pty, SubmitRequest,
    SubmitResponse,
};

fn main() {
    gang_proto::memory::keep_freed_memory();
    let args: Args = gang_cli::args::usage::parse_or_exit("prun");
    if let Some(t) = args.timeout {
        gang_cli::timeouts::set_limit(std::time::Duration::from_secs(t));
    }
    if args.command.first().is_none_or(|c| c.is_empty()) {
        use clap::CommandFactory;
        Args::command()
            .error(clap::error::ErrorKind::InvalidValue, "the command is empty")
            .exit();
    }
    let nodes = match gang_cli::args::nodes::one_request(&args.nodes, &args.ntasks) {
        Ok(nodes) => nodes,
        Err(why) => {
            use clap::CommandFactory;
            Args::command()
                .error(clap::error::ErrorKind::ArgumentConflict, why)
                .exit();
        }
    };
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
    let code = rt.block_on(run(args, nodes.unwrap_or_default()));
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Exit here: the stdin thread may sit in a blocking read.
    std::process::exit(code);
}

async fn run(args: Args, nodes: String) -> i32 {
    match submit_and_attach(args, nodes).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("prun: {e}");
            1
        }
    }
}

/// `nodes`: what -N and -n asked, as one request (empty: none).
async fn submit_and_attach(args: Args, nodes: String) -> Result<i32, CliError> {
    let master = client_config::master(args.master.clone())?;
    let cwd = working_dir(&args)?;
    let allocation = args.allocation.unwrap_or(0);
    check_allocation(&args, &nodes, allocation)?;
    let asked_count = match nodes.trim().parse::<Request>() {
        Ok(Request::Nodes(n)) => Some(n),
        _ => None,
    };
    if args.exact
        && allocation == 0
        && let Some(n) = asked_count
    {
        refuse_rounding(&master, n).await?;
    }
    let stdin = !args.detach && attach::stdin_is_useful();
    // Who we are comes from the connection (the socket's peer credentials, a user
    // certificate or a token), never from the request.
    // A token makes the submission safe to retry: if the master saved the job but its
    // answer was lost, the retry returns that job instead of making a second.
    let request = SubmitRequest {
        spec: Some(job_spec(&args, nodes, cwd, stdin, allocation)),
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
    let Some((submitted, interrupted)) = submit(&master, request, signals.as_mut()).await else {
        return Ok(130);
    };
    let submitted = submitted?;
    let job = submitted
        .job
        .ok_or_else(|| CliError::other("the master accepted the job but did not say its id"))?;
    note_rounding(&job, asked_count);
    if args.detach {
        print_detached(&job, submitted.array_tasks);
        return Ok(0);
    }
    if args.verbose {
        note_submitted(&job);
    }
    let signals = signals.expect("installed when attaching");
    Ok(attach_to(&args, master, &job, stdin, interrupted, signals).await)
}

/// Where the job runs: here, or `--chdir` from here; the proto carries it as UTF-8.
fn working_dir(args: &Args) -> Result<String, CliError> {
    let here = std::env::current_dir()
        .map_err(|e| CliError::other(format!("cannot get the current directory: {e}")))?;
    let cwd = match &args.chdir {
        Some(dir) => here.join(dir),
        None => here,
    };
    let text = cwd.to_str().ok_or_else(|| {
        CliError::other(format!(
            "the current directory {} is not UTF-8",
            cwd.display()
        ))
    })?;
    Ok(text.to_string())
}

/// Nodes are needed outside an allocation, and a step of one starts at once (no array,
/// dependency or hold).
fn check_allocation(args: &Args, nodes: &str, allocation: u64) -> Result<(), CliError> {
    if nodes.is_empty() && allocation == 0 {
        return Err(CliError::other(
            "-N (--nodes) or -n is required (outside an allocation: --allocation 0 or none)",
        ));
    }
    if allocation != 0 && (args.array.is_some() || args.dependency.is_some() || args.hold) {
        return Err(CliError::other(format!(
            "a step of allocation {allocation} starts at once: --array, --dependency and --hold \
             are for jobs of their own (--allocation 0)"
        )));
    }
    Ok(())
}

/// The job as `prun`'s options describe it.
fn job_spec(args: &Args, nodes: String, cwd: String, stdin: bool, allocation: u64) -> JobSpec {
    // The proto carries strings: variables that are not UTF-8 are left out.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    JobSpec {
        shape: nodes,
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
        mpi: mpi_of(args.mpi.as_deref()) as i32,
        mpi_check: args.mpi_check,
        output: args.output.clone().unwrap_or_default(),
        error: args.error.clone().unwrap_or_default(),
        dependency: args.dependency.clone().unwrap_or_default(),
        hold: args.hold,
        array: args.array.clone().unwrap_or_default(),
        allocation,
        allocate: false,
        script: String::new(),
        script_at: 0,
        pty: pty_of(args) as i32,
    }
}

/// `-u`/`--pty`: rank 0 on a pseudo-terminal, every rank with `--label`.
fn pty_of(args: &Args) -> Pty {
    match (args.unbuffered || args.pty, args.label) {
        (false, _) => Pty::None,
        (true, false) => Pty::Rank0,
        (true, true) => Pty::All,
    }
}

/// `--mpi`'s word as the proto's value.
fn mpi_of(word: Option<&str>) -> Mpi {
    match word {
        Some("auto") => Mpi::Auto,
        Some("none") => Mpi::None,
        Some("pmi2") => Mpi::Pmi2,
        Some("pmix") => Mpi::Pmix,
        Some(_) => Mpi::Pmi1,
        None => Mpi::Unspecified,
    }
}

/// Submit, retrying as the connection allows: the master's answer, and whether a signal
/// came meanwhile (the job is then cancelled as soon as it is attached to). `None`: a
/// second signal, and prun leaves without waiting for the answer.
async fn submit(
    master: &str,
    request: SubmitRequest,
    mut signals: Option<&mut attach::Signals>,
) -> Option<(Result<SubmitResponse, CliError>, bool)> {
    // A signal now cannot cancel a job whose id we do not know yet: the job is cancelled
    // as soon as the master answers (within --timeout), and a second signal leaves at once.
    let submit = connect::submit_with_retries(master, request);
    tokio::pin!(submit);
    let mut interrupted = false;
    loop {
        let signal = async {
            match signals.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = &mut submit => return Some((r, interrupted)),
            _ = signal => {
                if interrupted {
                    eprintln!("prun: left before the master answered; if it made the job, `gangctl jobs` shows it");
                    return None;
                }
                interrupted = true;
                eprintln!("prun: cancelling the job as soon as the master answers (again to leave now)");
            }
        }
    }
}

/// A count of nodes the master rounded up to a rectangle: said, not refused.
fn note_rounding(job: &JobInfo, asked_count: Option<u64>) {
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
}

/// `--detach`: the job's id on stdout (an array's, as sbatch), its tasks on stderr.
fn print_detached(job: &JobInfo, array_tasks: u32) {
    println!("{}", job.id);
    if array_tasks > 1 {
        // As sbatch: the array's id; its tasks are the jobs from it on.
        eprintln!(
            "prun: array {} of {array_tasks} tasks: jobs {}-{}",
            job.id,
            job.id,
            job.id + u64::from(array_tasks) - 1
        );
    }
}

/// `--verbose`: the job submitted, and where its files go.
fn note_submitted(job: &JobInfo) {
    eprintln!(
        "prun: job {} submitted ({}, gang mode {})",
        job.id,
        job.state().label(),
        gang_mode::label(job.gang())
    );
    if let Some(note) = ends::files_note(job) {
        eprintln!("prun: job {}: {note}", job.id);
    }
}

/// Attach to the job until it ends: its exit code. Why it waits is said if it is still
/// queued after a second (unless -q).
async fn attach_to(
    args: &Args,
    master: String,
    job: &JobInfo,
    stdin: bool,
    interrupted: bool,
    signals: attach::Signals,
) -> i32 {
    let said_queued = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queue_note = (!args.quiet && job.state() == gang_proto::v1::JobState::Queued).then(|| {
        gang_cli::prun::queue_note::spawn("prun", master.clone(), job.id, said_queued.clone())
    });
    let code = attach::run(
        AttachOptions {
            prog: "prun",
            master,
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
        signals,
    )
    .await;
    if let Some(task) = queue_note {
        task.abort();
    }
    code
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
