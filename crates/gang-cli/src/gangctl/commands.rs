//! One small function a `gangctl` subcommand, called by [`super::run`]: each turns its
//! parsed arguments into a call of the module that does the work, and prints the result.

use std::path::{Path, PathBuf};

use gang_auth::PeerName;
use gang_local::driver::signals::StopSignals;
use gang_proto::client::MasterChannel;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{
    GetJobRequest, GetMatrixRequest, GetStatsRequest, JobInfo, JobState, ListNodesRequest,
    NodeRequest,
};

use super::cli::{CertsCmd, Program};
use super::usage::bad_value;
use crate::connect::{self, certs, tokens};
use crate::error::CliError;
use crate::jobs::job_filter::{JobFilter, States};
use crate::jobs::job_ref::{self, Named};
use crate::jobs::resolve;
use crate::output::OutputMode;
use crate::output::jobs_view::{JobsView, steps_after_allocations};
use crate::output::views::{MatrixView, NodeView, NodeViews, NodesView, StatsView};
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

/// The jobs a command line names (`3,5-9`, `12.1`, `17_[1-4]`, `last`); a form it
/// cannot read is a usage error.
pub(super) fn named(ids: &[String]) -> Option<Named> {
    job_ref::parse_named(ids).unwrap_or_else(|e| bad_value(e))
}

/// The one job `job`, `attach`, `output` and `update` take; more is a usage error.
pub(super) fn one_named(cmd: &str, job: &str) -> Named {
    match named(std::slice::from_ref(&job.to_string())) {
        Some(n) if resolve::names_one(&n) => n,
        _ => bad_value(format!(
            "gangctl {cmd} takes one job: ID, ID.STEP, ID_TASK or `last`, got {job:?}"
        )),
    }
}

/// What `jobs` and `acct` list: the jobs named (looked up once connected), the user and
/// time, the states, finished ones too (`all`), at most `limit` (0: the default).
pub(super) struct Listing {
    pub named: Option<Named>,
    pub filter: JobFilter,
    pub state: Option<States>,
    pub all: bool,
    pub limit: u32,
}

impl Listing {
    pub fn new(
        ids: &[String],
        user: Option<String>,
        since: Option<i64>,
        state: Option<States>,
        limit: u32,
    ) -> Listing {
        Listing {
            named: named(ids),
            filter: JobFilter {
                sel: None,
                user,
                since_ns: since,
            },
            state,
            all: false,
            limit,
        }
    }
}

/// `gangctl jobs` with its filters. States go to the master; ids, user and time are
/// applied to its listing, and named ids it did not list (older than its limit) are
/// fetched one by one.
pub(super) async fn list_jobs(
    master: &str,
    mode: OutputMode,
    listing: Listing,
) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    let (jobs, failed) = fetch_jobs(&mut client, master, listing).await?;
    mode.print(&JobsView(&steps_after_allocations(jobs)));
    Ok(if failed { 1 } else { 0 })
}

/// `gangctl acct`: as sacct, today's jobs (UTC) unless jobs or a time are named, oldest
/// first, each allocation followed by its steps (none with `allocations_only`, sacct's
/// `-X`).
pub(super) async fn acct(
    master: &str,
    mode: OutputMode,
    mut listing: Listing,
    format: crate::jobs::acct::Format,
    allocations_only: bool,
) -> Result<i32, CliError> {
    let now = super::cli::now_ns();
    let today = listing.named.is_none().then_some(now - now % DAY_NS);
    listing.filter.since_ns = listing.filter.since_ns.or(today);
    listing.all = true;
    let states = listed_states(listing.state.clone(), true);
    let mut client = connect::job_client(master).await?;
    let (mut jobs, failed) = fetch_jobs(&mut client, master, listing).await?;
    if allocations_only {
        jobs.retain(|j| j.allocation_id == 0);
    } else {
        crate::jobs::listing::add_steps(&mut client, &mut jobs, &states).await?;
    }
    jobs.sort_by_key(|j| j.id);
    mode.print(&crate::jobs::acct::AcctView {
        jobs: &steps_after_allocations(jobs),
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

/// The jobs [`list_jobs`] shows, newest first, and whether a named one could not be
/// fetched.
async fn fetch_jobs(
    client: &mut JobServiceClient<MasterChannel>,
    master: &str,
    l: Listing,
) -> Result<(Vec<JobInfo>, bool), CliError> {
    let mut filter = l.filter;
    if let Some(n) = &l.named {
        filter.sel = Some(resolve::resolve(client, master, n).await?);
    }
    // Naming jobs or a time is asking about history, as sacct does: finished ones too.
    let history = l.all || filter.sel.is_some() || filter.since_ns.is_some();
    let states = listed_states(l.state, history);
    let want = match l.limit {
        0 => DEFAULT_LIMIT,
        n => n as usize,
    };
    // Single ids alone need no listing: each is asked for.
    let mut jobs: Vec<JobInfo> = match &filter.sel {
        Some(sel) if sel.ranges.is_empty() => Vec::new(),
        _ => crate::jobs::listing::list(client, &states, want)
            .await?
            .into_iter()
            .filter(|j| filter.matches(j))
            .collect(),
    };
    let mut failed = false;
    let single = filter.sel.as_ref().map_or(&[][..], |s| &s.single[..]);
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

/// `gangctl job JOB`, with an allocation's steps (the newest ones if there are many).
pub(super) async fn job(master: &str, mode: OutputMode, named: Named) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    let id = resolve::resolve_one(&mut client, master, &named).await?;
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
    let sel = CancelSel::new(named(ids), user, state).unwrap_or_else(|e| bad_value(e));
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

/// `gangctl attach JOB`.
pub(super) async fn attach(
    master: &str,
    job: &str,
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
    attach(master, &one_named("attach", job), flags).await
}

/// `gangctl output JOB`, of one rank or stream if asked.
pub(super) async fn output(
    master: &str,
    job: &str,
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
    output(master, &one_named("output", job), filter).await
}

/// `gangctl hold` (`hold`) or `release` (not): the jobs named.
pub(super) async fn hold(
    master: &str,
    mode: OutputMode,
    ids: &[String],
    hold: bool,
) -> Result<i32, CliError> {
    let Some(named) = named(ids) else {
        bad_value("name the jobs by id".to_string())
    };
    crate::jobs::job_update::hold(master, mode, named, hold).await
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
