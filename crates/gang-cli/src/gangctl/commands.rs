//! One small function a `gangctl` subcommand, called by [`super::run`]: each turns its
//! parsed arguments into a call of the module that does the work, and prints the result.

use std::path::{Path, PathBuf};

use gang_auth::PeerName;
use gang_local::driver::signals::StopSignals;
use gang_proto::v1::{
    GetJobRequest, GetMatrixRequest, GetStatsRequest, JobInfo, JobState, ListNodesRequest,
    NodeRequest,
};

use super::cli::{CertsCmd, Program};
use super::usage::bad_value;
use crate::connect::{self, certs, tokens};
use crate::error::CliError;
use crate::jobs::job_filter::{self, JobFilter, JobSel, States};
use crate::output::OutputMode;
use crate::output::views::{JobsView, MatrixView, NodeView, NodeViews, NodesView, StatsView};
use crate::prun::relay::Dest;

/// `gangctl job` of an allocation lists at most this many of its steps (the newest).
const MAX_STEPS_SHOWN: usize = 50;
/// How many jobs a listing shows when not told (`--limit 0`).
const DEFAULT_LIMIT: usize = 1000;
/// A day in nanoseconds: `gangctl acct` lists today's jobs (UTC) when not told.
const DAY_NS: i64 = 86_400_000_000_000;

/// `gangctl start`, with the signal thread `main` started.
pub(super) async fn start(
    args: crate::start::StartArgs,
    signals: Option<StopSignals>,
) -> Result<i32, CliError> {
    match signals {
        Some(signals) => crate::start::start(args, signals).await,
        None => Err(CliError::other("gangctl start without its signal thread")),
    }
}

/// The filter of `jobs` and `acct`; bad ids are a usage error.
pub(super) fn job_filter(ids: &[String], user: Option<String>, since: Option<i64>) -> JobFilter {
    let sel = job_filter::parse_job_sel(ids).unwrap_or_else(|e| bad_value(e));
    JobFilter {
        sel,
        user,
        since_ns: since,
    }
}

/// `gangctl jobs` with its filters. States go to the master; ids, user and time are
/// applied to its listing, and named ids it did not list (older than its limit) are
/// fetched one by one.
pub(super) async fn list_jobs(
    master: &str,
    mode: OutputMode,
    filter: JobFilter,
    state: Option<States>,
    all: bool,
    limit: u32,
) -> Result<i32, CliError> {
    let (jobs, failed) = fetch_jobs(master, filter, state, all, limit).await?;
    mode.print(&JobsView(&jobs));
    Ok(if failed { 1 } else { 0 })
}

/// `gangctl acct`: as sacct, today's jobs (UTC) unless jobs or a time are named, oldest
/// first.
pub(super) async fn acct(
    master: &str,
    mode: OutputMode,
    mut filter: JobFilter,
    state: Option<States>,
    format: crate::jobs::acct::Format,
    limit: u32,
) -> Result<i32, CliError> {
    let now = super::cli::now_ns();
    let today = filter.sel.is_none().then_some(now - now % DAY_NS);
    filter.since_ns = filter.since_ns.or(today);
    let (mut jobs, failed) = fetch_jobs(master, filter, state, true, limit).await?;
    jobs.sort_by_key(|j| j.id);
    mode.print(&crate::jobs::acct::AcctView {
        jobs: &jobs,
        columns: &format.0,
        now_ns: now,
    });
    Ok(if failed { 1 } else { 0 })
}

/// The states a listing asks the master for: those named, else all for history (jobs or
/// a time named, as sacct), else the live ones.
fn listed_states(state: Option<States>, history: bool) -> Vec<i32> {
    match state {
        Some(s) => s.0.iter().map(|s| *s as i32).collect(),
        None if history => Vec::new(),
        None => [JobState::Queued, JobState::Starting, JobState::Running]
            .iter()
            .map(|s| *s as i32)
            .collect(),
    }
}

/// The jobs [`list_jobs`] shows, and whether a named one could not be fetched.
async fn fetch_jobs(
    master: &str,
    filter: JobFilter,
    state: Option<States>,
    all: bool,
    limit: u32,
) -> Result<(Vec<JobInfo>, bool), CliError> {
    // Naming jobs or a time is asking about history, as sacct does: finished ones too.
    let history = all || filter.sel.is_some() || filter.since_ns.is_some();
    let states = listed_states(state, history);
    let mut client = connect::job_client(master).await?;
    let want = match (filter.sel == Some(JobSel::Last), limit) {
        (true, _) => 1,
        (false, 0) => DEFAULT_LIMIT,
        (false, n) => n as usize,
    };
    let listed = crate::jobs::listing::list(&mut client, &states, want).await?;
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
    Ok((jobs, failed))
}

/// `gangctl submit`'s batch script: `--wrap CMD`, or a file.
pub(super) fn script_source(wrap: Option<String>, script: Option<PathBuf>) -> crate::batch::Source {
    match (wrap, script) {
        (Some(cmd), _) => crate::batch::Source::Wrap(cmd),
        (None, Some(path)) => crate::batch::Source::File(path),
        (None, None) => unreachable!("clap requires one"),
    }
}

/// `gangctl job ID`, with an allocation's steps (the newest ones if there are many).
pub(super) async fn job(master: &str, mode: OutputMode, id: u64) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    let job = client
        .get_job(GetJobRequest { job_id: id })
        .await?
        .into_inner();
    let mut steps = Vec::new();
    let shown = job.step_ids.len().saturating_sub(MAX_STEPS_SHOWN);
    for &s in &job.step_ids[shown..] {
        steps.push(
            client
                .get_job(GetJobRequest { job_id: s })
                .await?
                .into_inner(),
        );
    }
    mode.print(&crate::output::steps_view::JobWithSteps {
        job: &job,
        steps: &steps,
    });
    Ok(0)
}

/// `gangctl cancel`; a selection it cannot take is a usage error.
pub(super) async fn cancel(
    master: &str,
    mode: OutputMode,
    ids: &[String],
    user: Option<String>,
    state: Option<States>,
) -> Result<i32, CliError> {
    use crate::jobs::cancel::{CancelSel, cancel};
    let sel = job_filter::parse_job_sel(ids)
        .and_then(|sel| {
            let filter = JobFilter {
                sel,
                user,
                since_ns: None,
            };
            CancelSel::new(filter, state)
        })
        .unwrap_or_else(|e| bad_value(e));
    cancel(master, mode, sel).await
}

/// `gangctl nodes`.
pub(super) async fn nodes(master: &str, mode: OutputMode) -> Result<i32, CliError> {
    let mut client = connect::admin_client(master).await?;
    let nodes = client.list_nodes(ListNodesRequest {}).await?.into_inner();
    mode.print(&NodesView(&nodes));
    Ok(0)
}

/// `gangctl slices`, once or `--watch`ed.
pub(super) async fn slices(
    master: &str,
    mode: OutputMode,
    watch: bool,
    interval_ms: u64,
) -> Result<i32, CliError> {
    let mut client = connect::admin_client(master).await?;
    if !watch {
        let m = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
        mode.print(&MatrixView(&m));
        return Ok(0);
    }
    crate::output::slices_watch::watch_slices(&mut client, mode, master, interval_ms).await
}

/// `gangctl stats`.
pub(super) async fn stats(master: &str, mode: OutputMode) -> Result<i32, CliError> {
    let mut client = connect::admin_client(master).await?;
    let stats = client.get_stats(GetStatsRequest {}).await?.into_inner();
    mode.print(&StatsView(&stats));
    Ok(0)
}

/// `drain` / `resume`: one request per node, each reported; a refusal does not stop the
/// others, and makes the exit status 1.
pub(super) async fn set_drained(
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

/// `gangctl certs init|user|node`: the files written, a line each.
pub(super) fn certs(cmd: CertsCmd) -> Result<i32, CliError> {
    let lines = match cmd {
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

/// `gangctl token`.
pub(super) async fn token(master: &str, ttl: Option<u64>, save: bool) -> Result<i32, CliError> {
    println!("{}", tokens::token(master, ttl.unwrap_or(0), save).await?);
    Ok(0)
}

/// `gangctl token revoke`: a token, an id or every token of a user.
pub(super) async fn revoke(
    master: &str,
    token: Option<String>,
    id: Option<String>,
    user: Option<String>,
) -> Result<i32, CliError> {
    // The argument group lets exactly one through.
    let what = match (token, id, user) {
        (Some(t), _, _) => tokens::Revoke::Token(t),
        (_, Some(id), _) => tokens::Revoke::Id(id),
        (_, _, Some(u)) => tokens::Revoke::User(u),
        (None, None, None) => {
            return Err(CliError::other("say what to revoke: TOKEN, --id or --user"));
        }
    };
    println!("{}", tokens::revoke(master, what).await?);
    Ok(0)
}

/// `gangctl attach ID`.
pub(super) async fn attach(
    master: &str,
    id: u64,
    label: bool,
    verbose: bool,
    quiet: bool,
) -> Result<i32, CliError> {
    use crate::jobs::job_output::{AttachFlags, attach};
    let flags = AttachFlags {
        label,
        verbose,
        quiet,
    };
    attach(master, id, flags).await
}

/// `gangctl output ID`, of one rank or stream if asked.
pub(super) async fn output(
    master: &str,
    id: u64,
    rank: Option<u32>,
    stream: Option<String>,
    label: bool,
) -> Result<i32, CliError> {
    use crate::jobs::job_output::{OutputFilter, output};
    let filter = OutputFilter {
        rank,
        stream: stream.map(|s| {
            if s == "stderr" {
                Dest::Stderr
            } else {
                Dest::Stdout
            }
        }),
        label,
    };
    output(master, id, filter).await
}

/// `gangctl hold` (`hold`) or `release` (not): jobs named by id.
pub(super) async fn hold(
    master: &str,
    mode: OutputMode,
    ids: &[String],
    hold: bool,
) -> Result<i32, CliError> {
    let sel = job_filter::parse_job_sel(ids)
        .and_then(|s| s.ok_or_else(|| "name the jobs by id".to_string()))
        .unwrap_or_else(|e| bad_value(e));
    crate::jobs::job_update::hold(master, mode, sel, hold).await
}

/// `gangctl completions SHELL [COMMAND]`.
pub(super) fn completions(shell: clap_complete::Shell, command: Program) -> Result<i32, CliError> {
    super::shell_docs::completions(shell, command, &mut std::io::stdout())
        .map_err(|e| CliError::other(format!("cannot write the completions: {e}")))?;
    Ok(0)
}

/// `gangctl man DIR`.
pub(super) fn man(dir: &Path) -> Result<i32, CliError> {
    let pages = super::shell_docs::man_pages(dir).map_err(|e| {
        CliError::other(format!("cannot write man pages to {}: {e}", dir.display()))
    })?;
    eprintln!(
        "gangctl: {} man pages written to {}",
        pages.len(),
        dir.display()
    );
    Ok(0)
}
