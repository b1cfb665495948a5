//! `gangctl attach JOB` and `gangctl output JOB`: a submitted job's output from the CLI,
//! as `sattach` and `flux job attach` give it, for jobs run with `prun --detach` or whose
//! `prun` is gone; a job named as anywhere (`12`, `12.0`, `17_3`, `last`).
//!
//! `attach` is `prun`'s own attach loop (`attach::run`): the output from the start, then
//! live, stdin to rank 0, the job's exit code; a signal detaches instead of cancelling.
//! `output` asks the master for the log as it is now (`AttachRequest.no_follow`) and
//! prints it, for finished and running jobs alike.

use gang_proto::v1::attach_response::Event;
use gang_proto::v1::{AttachRequest, GetJobRequest, JobInfo};

use crate::connect::{self, CliError};
use crate::jobs::job_ref::Named;
use crate::output::format::job_label;
use crate::prun::attach::{self, AttachOptions, OnSignal, Signals, write_out};
use crate::prun::ends;
use crate::prun::relay::{Dest, Relay};

/// `gangctl attach`'s flags.
#[derive(Debug, Clone, Copy)]
pub struct AttachFlags {
    pub label: bool,
    pub verbose: bool,
    pub quiet: bool,
}

/// The job `named` stands for, as the master has it now.
async fn get_job(master: &str, named: &Named) -> Result<JobInfo, CliError> {
    let mut client = connect::job_client(master).await?;
    let id = super::resolve::resolve_one(&mut client, master, named).await?;
    Ok(client
        .get_job(GetJobRequest { job_id: id })
        .await?
        .into_inner())
}

/// Follow the job `named` until it ends; the job's exit code, as `prun`'s.
pub async fn attach(master: &str, named: &Named, flags: AttachFlags) -> Result<i32, CliError> {
    // Installed first: a Ctrl-C from here on detaches cleanly.
    let signals = Signals::install()
        .map_err(|e| CliError::other(format!("cannot install signal handlers: {e}")))?;
    // Asked first so that an unknown job is an error of its own, not a broken stream.
    let job = get_job(master, named).await?;
    let id = job.id;
    if let Some(note) = ends::files_note(&job) {
        eprintln!("gangctl: job {}: {note}", job_label(&job));
    }
    // Rank 0 reads what we send only if the job was submitted to read stdin (prun
    // attached to a terminal or pipe); a job submitted detached reads /dev/null.
    let takes_stdin = job.spec.as_ref().is_some_and(|s| s.stdin);
    Ok(attach::run(
        AttachOptions {
            prog: "gangctl",
            master: master.to_string(),
            job_id: id,
            uid: 0,
            stdin: takes_stdin && attach::stdin_is_useful(),
            label: flags.label,
            verbose: flags.verbose,
            quiet: flags.quiet,
            on_signal: OnSignal::Detach,
            cancel_now: false,
            said_queued: None,
        },
        signals,
    )
    .await)
}

/// Which part of a job's output `gangctl output` prints.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutputFilter {
    pub rank: Option<u32>,
    /// One stream only, printed on our stdout; `None`: each to its own.
    pub stream: Option<Dest>,
    pub label: bool,
}

/// Print what the job `named` wrote so far and return.
pub async fn output(master: &str, named: &Named, filter: OutputFilter) -> Result<i32, CliError> {
    let job = get_job(master, named).await?;
    let (id, label) = (job.id, job_label(&job));
    let size = job.w * job.h;
    if let Some(rank) = filter.rank
        && size > 0
        && rank >= size
    {
        return Err(CliError::other(format!(
            "job {label} has {size} ranks (0 to {}): there is no rank {rank}",
            size - 1
        )));
    }
    if let Some(note) = ends::files_note(&job) {
        eprintln!("gangctl: job {label}: {note}");
    }
    let mut client = connect::job_client(master).await?;
    let first = AttachRequest {
        job_id: id,
        stdin: Vec::new(),
        stdin_eof: false,
        no_follow: true,
    };
    let mut stream = client.attach(tokio_stream::once(first)).await?.into_inner();
    let mut relay = Relay::new(filter.label);
    let mut finished = None;
    while let Some(msg) = stream.message().await? {
        let o = match msg.event {
            Some(Event::Output(o)) => o,
            Some(Event::Finished(j)) => {
                finished = Some(j);
                continue;
            }
            _ => continue,
        };
        if filter.rank.is_some_and(|r| r != o.rank) {
            continue;
        }
        let (dest, bytes) = relay.output(o.rank, o.stream, &o.data);
        match filter.stream {
            None => write_out(dest, &bytes),
            Some(want) if want == dest => write_out(Dest::Stdout, &bytes),
            Some(_) => {}
        }
    }
    for (dest, bytes) in relay.finish() {
        match filter.stream {
            None => write_out(dest, &bytes),
            Some(want) if want == dest => write_out(Dest::Stdout, &bytes),
            Some(_) => {}
        }
    }
    // The log as it is lacks what was lost: say so, and do not end with 0.
    Ok(finished.map_or(0, |j| ends::lost_output_code("gangctl", &j, 0)))
}
