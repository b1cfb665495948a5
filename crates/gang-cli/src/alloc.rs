//! `gangctl alloc`, as salloc: an allocation is asked for and waited for, then a command
//! (a shell by default) runs here with GANG_ALLOCATION_ID set, so that prun in it starts
//! steps on the allocation's nodes at once. The command's exit ends the allocation (and
//! gangctl exits with its status); the allocation's end (its time limit, a cancel) stops
//! the command.

use std::process::ExitStatus;
use std::time::Duration;

use gang_proto::v1::{
    CancelRequest, EndAllocationRequest, JobEvent, JobInfo, JobSpec, JobState, SubmitRequest,
    WatchRequest,
};
use tokio::process::Child;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_stream::StreamExt;
use tonic::Streaming;

use crate::batch::{AllocOptions, start_dir};
use crate::connect::{self, CliError};

/// How long the command has to leave after SIGTERM once its allocation ended.
const COMMAND_GRACE: Duration = Duration::from_secs(5);

fn submesh_text(j: &JobInfo) -> String {
    j.submesh
        .map(|s| format!("{}x{}@({},{})", s.w, s.h, s.x, s.y))
        .unwrap_or_else(|| "-".into())
}

fn ended_text(j: &JobInfo) -> String {
    let state = j.state().label();
    if j.reason.is_empty() {
        state.to_string()
    } else {
        format!("{state}: {}", j.reason)
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// SIGINT, SIGTERM and SIGHUP, taken while the allocation is asked for and used.
struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    fn install() -> Result<Self, CliError> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt()).map_err(sig_err)?,
            term: signal(SignalKind::terminate()).map_err(sig_err)?,
            hup: signal(SignalKind::hangup()).map_err(sig_err)?,
        })
    }
}

/// Ask for the allocation, run `command` in it, give it back.
pub async fn alloc(
    master: &str,
    opts: AllocOptions,
    command: Vec<String>,
) -> Result<i32, CliError> {
    let nodes = opts
        .node_request()
        .unwrap_or_else(|e| crate::gangctl::usage::bad_value(e))
        .ok_or_else(|| CliError::other("no nodes asked: give -n SHAPE (e.g. -n 2x2, or -n 4)"))?;
    let command = if command.is_empty() {
        vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into())]
    } else {
        command
    };
    let cwd = start_dir(opts.chdir.as_deref())?;
    let request = SubmitRequest {
        spec: Some(alloc_spec(&opts, nodes, &command, cwd.clone())),
        client_token: connect::new_client_token()?,
        ..Default::default()
    };
    let mut sigs = StopSignals::install()?;
    let job = connect::submit_with_retries(master, request)
        .await?
        .job
        .unwrap_or_default();
    let id = job.id;
    let said = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let notes = crate::prun::queue_note::spawn("gangctl", master.to_string(), id, said);
    let mut client = connect::job_client(master).await?;
    let mut events = client
        .watch(WatchRequest { job_id: id })
        .await?
        .into_inner();
    let granted = wait_granted(master, id, &mut events, &mut sigs).await;
    notes.abort();
    let granted = match granted? {
        Granted::Yes(j) => j,
        Granted::GivenBack(code) => return Ok(code),
    };
    eprintln!(
        "gangctl: granted allocation {id} on {}",
        submesh_text(&granted)
    );
    let child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .current_dir(&cwd)
        .env("GANG_ALLOCATION_ID", id.to_string())
        .env("GANG_JOB_ID", id.to_string())
        .env("GANG_MASTER", master)
        .spawn()
        .map_err(|e| CliError::other(format!("cannot start {:?}: {e}", command[0])));
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            end(master, id, 127).await;
            return Err(e);
        }
    };
    let code = match run_in(id, &command[0], child, &mut events, &mut sigs).await? {
        Ran::Exited(code) => code,
        Ran::AllocationEnded(code) => return Ok(code),
    };
    end(master, id, code).await;
    Ok(code)
}

/// The allocation as a job: named for the command unless `--job-name` says.
fn alloc_spec(opts: &AllocOptions, nodes: String, command: &[String], cwd: String) -> JobSpec {
    let name = opts.name.clone().unwrap_or_else(|| {
        let p = std::path::Path::new(&command[0]);
        p.file_name()
            .map_or_else(|| command[0].clone(), |n| n.to_string_lossy().into_owned())
    });
    JobSpec {
        shape: nodes,
        cwd,
        time_limit_s: opts.time_limit.unwrap_or(0),
        name,
        gang: crate::args::gang_mode::to_proto(opts.gang) as i32,
        dependency: opts.dependency.clone().unwrap_or_default(),
        hold: opts.hold,
        allocate: true,
        ..Default::default()
    }
}

/// How the wait for the grant ended.
enum Granted {
    Yes(Box<JobInfo>),
    /// A signal came first: the allocation was cancelled; exit with this code.
    GivenBack(i32),
}

/// Wait until the allocation is granted, or ended first; a signal while waiting gives it
/// back.
async fn wait_granted(
    master: &str,
    id: u64,
    events: &mut Streaming<JobEvent>,
    sigs: &mut StopSignals,
) -> Result<Granted, CliError> {
    loop {
        tokio::select! {
            ev = events.next() => {
                let ev = ev.ok_or_else(|| CliError::other(format!(
                    "the master ended the watch of allocation {id} before it was granted"
                )))??;
                let j = ev.job.unwrap_or_default();
                match j.state() {
                    JobState::Running => return Ok(Granted::Yes(Box::new(j))),
                    s if is_final(s) => {
                        return Err(CliError::other(format!(
                            "allocation {id} ended before it was granted ({})",
                            ended_text(&j)
                        )));
                    }
                    _ => {}
                }
            }
            _ = sigs.int.recv() => return give_back(master, id, 130).await.map(Granted::GivenBack),
            _ = sigs.term.recv() => return give_back(master, id, 143).await.map(Granted::GivenBack),
            _ = sigs.hup.recv() => return give_back(master, id, 129).await.map(Granted::GivenBack),
        }
    }
}

/// How the command's run in the allocation ended.
enum Ran {
    /// The command exited with this code: the allocation is to be ended with it.
    Exited(i32),
    /// The allocation ended first (time limit, cancel): the command was stopped; exit
    /// with the allocation's code.
    AllocationEnded(i32),
}

/// Run the command until it exits, or until the allocation ends (then it is stopped:
/// SIGTERM, SIGKILL past the grace). SIGTERM and SIGHUP are passed on.
async fn run_in(
    id: u64,
    program: &str,
    mut child: Child,
    events: &mut Streaming<JobEvent>,
    sigs: &mut StopSignals,
) -> Result<Ran, CliError> {
    let pid = child.id().map(|p| nix::unistd::Pid::from_raw(p as i32));
    let forward = |sig: nix::sys::signal::Signal| {
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(pid, sig);
        }
    };
    let mut watching = true;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st.map_err(|e| CliError::other(format!("waiting for the command: {e}")))?,
            ev = events.next(), if watching => match ev {
                Some(Ok(ev)) => {
                    let j = ev.job.unwrap_or_default();
                    if is_final(j.state()) {
                        eprintln!(
                            "gangctl: allocation {id} ended ({}): stopping {program:?}",
                            ended_text(&j),
                        );
                        forward(nix::sys::signal::Signal::SIGTERM);
                        let st = match tokio::time::timeout(COMMAND_GRACE, child.wait()).await {
                            Ok(st) => st,
                            Err(_) => {
                                forward(nix::sys::signal::Signal::SIGKILL);
                                child.wait().await
                            }
                        };
                        drop(st);
                        return Ok(Ran::AllocationEnded(j.exit_code.unwrap_or(1)));
                    }
                }
                // The master went away: the command carries on; its end is told later.
                _ => watching = false,
            },
            // Ctrl-C at the terminal reaches the command too: it is the command's to handle.
            _ = sigs.int.recv() => {}
            _ = sigs.term.recv() => forward(nix::sys::signal::Signal::SIGTERM),
            _ = sigs.hup.recv() => forward(nix::sys::signal::Signal::SIGHUP),
        }
    };
    Ok(Ran::Exited(exit_code(status)))
}

fn is_final(s: JobState) -> bool {
    matches!(
        s,
        JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Timeout
    )
}

fn sig_err(e: std::io::Error) -> CliError {
    CliError::other(format!("cannot install signal handlers: {e}"))
}

/// End the allocation with the command's status, saying so.
async fn end(master: &str, id: u64, code: i32) {
    let answer = async {
        let mut client = connect::job_client(master).await?;
        client
            .end_allocation(EndAllocationRequest {
                job_id: id,
                exit_code: code,
            })
            .await?;
        Ok::<_, CliError>(())
    };
    match answer.await {
        Ok(()) => eprintln!("gangctl: relinquished allocation {id}"),
        Err(e) => eprintln!(
            "gangctl: could not end allocation {id} ({e}); `gangctl cancel {id}` frees its nodes"
        ),
    }
}

/// A signal before the allocation was granted: cancel it, and exit as the signal says.
async fn give_back(master: &str, id: u64, code: i32) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    client.cancel(CancelRequest { job_id: id, uid: 0 }).await?;
    eprintln!("gangctl: allocation {id} cancelled before it was granted");
    Ok(code)
}
