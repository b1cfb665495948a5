//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, stats, cancel,
//! drain), or start a whole local cluster.

use std::io::Write;

use clap::Parser;
use gang_auth::PeerName;
use gang_cli::args::gangctl::{CertsCmd, Cli, Cmd, TokenCmd};
use gang_cli::connect::certs;
use gang_cli::connect::client_config;
use gang_cli::connect::{self, CliError};
use gang_cli::jobs::job_filter;
use gang_cli::output::OutputMode;
use gang_cli::output::views::ErrorView;

/// `gangctl job` of an allocation lists at most this many of its steps (the newest).
const MAX_STEPS_SHOWN: usize = 50;
use gang_cli::connect::tokens;
use gang_cli::output::views::{JobsView, MatrixView, NodeView, NodeViews, NodesView, StatsView};
use gang_local::check_mesh;
use gang_local::driver::signals::{StopSignals, catch_stop_signals};
use gang_proto::v1::{
    GetJobRequest, GetMatrixRequest, GetStatsRequest, JobState, ListNodesRequest, NodeRequest,
};

/// Whether the command line or GANG_OUTPUT asks for JSON, read by hand when clap refused
/// the command line (and so gave no `Cli`).
fn json_requested() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|w| w[0] == "--output" && w[1] == "json")
        || args.iter().any(|a| a == "--output=json")
        || std::env::var("GANG_OUTPUT").is_ok_and(|v| v == "json")
}

/// A value clap took but the command refuses (`9-3`, `last` where it means nothing): a
/// usage error, exit 2, as clap's own.
fn bad_value(e: String) -> ! {
    use clap::CommandFactory;
    usage_error(Cli::command().error(clap::error::ErrorKind::InvalidValue, e))
}

/// clap's own exit, but a usage error under `--output json` is a JSON object too (exit 2).
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if help {
        e.exit()
    }
    if !json_requested() {
        gang_cli::args::usage::exit_with("gangctl", e)
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
        // Before the runtime or any other thread exists (see gang_local::driver::signals).
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
        Cmd::Start(_) | Cmd::Certs(_) | Cmd::Completions { .. } | Cmd::Man { .. } => String::new(),
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
            let sel = job_filter::parse_job_sel(&ids).unwrap_or_else(|e| bad_value(e));
            let filter = job_filter::JobFilter {
                sel,
                user,
                since_ns: since,
            };
            list_jobs(&master, mode, filter, state, all, limit).await
        }
        Cmd::Acct {
            ids,
            user,
            state,
            since,
            format,
            limit,
        } => {
            let sel = job_filter::parse_job_sel(&ids).unwrap_or_else(|e| bad_value(e));
            let now = gang_cli::args::gangctl::now_ns();
            // As sacct: today's jobs (UTC), unless jobs or a time are named.
            const DAY_NS: i64 = 86_400_000_000_000;
            let since = since.or_else(|| sel.is_none().then_some(now - now % DAY_NS));
            let filter = job_filter::JobFilter {
                sel,
                user,
                since_ns: since,
            };
            let (mut jobs, failed) = fetch_jobs(&master, filter, state, true, limit).await?;
            // Oldest first, as sacct lists them.
            jobs.sort_by_key(|j| j.id);
            mode.print(&gang_cli::jobs::acct::AcctView {
                jobs: &jobs,
                columns: &format.0,
                now_ns: now,
            });
            Ok(if failed { 1 } else { 0 })
        }
        Cmd::Alloc { opts, command } => gang_cli::alloc::alloc(&master, opts, command).await,
        Cmd::Submit {
            opts,
            parsable,
            wrap,
            script,
            args,
        } => {
            let script = match (wrap, script) {
                (Some(cmd), _) => gang_cli::batch::Source::Wrap(cmd),
                (None, Some(path)) => gang_cli::batch::Source::File(path),
                (None, None) => unreachable!("clap requires one"),
            };
            gang_cli::batch::submit(&master, mode, script, &args, opts, parsable).await
        }
        Cmd::Job { id } => {
            let mut client = connect::job_client(&master).await?;
            let job = client
                .get_job(GetJobRequest { job_id: id })
                .await?
                .into_inner();
            // An allocation's steps, the newest ones if there are many.
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
            mode.print(&gang_cli::output::steps_view::JobWithSteps {
                job: &job,
                steps: &steps,
            });
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
                    gang_cli::jobs::cancel::CancelSel::new(filter, state)
                })
                .unwrap_or_else(|e| bad_value(e));
            gang_cli::jobs::cancel::cancel(&master, mode, sel).await
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
            gang_cli::output::slices_watch::watch_slices(&mut client, mode, &master, interval_ms)
                .await
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
            let flags = gang_cli::jobs::job_output::AttachFlags {
                label,
                verbose,
                quiet,
            };
            gang_cli::jobs::job_output::attach(&master, id, flags).await
        }
        Cmd::Output {
            id,
            rank,
            stream,
            label,
        } => {
            let filter = gang_cli::jobs::job_output::OutputFilter {
                rank,
                stream: stream.map(|s| {
                    if s == "stderr" {
                        gang_cli::prun::relay::Dest::Stderr
                    } else {
                        gang_cli::prun::relay::Dest::Stdout
                    }
                }),
                label,
            };
            gang_cli::jobs::job_output::output(&master, id, filter).await
        }
        Cmd::Resume { nodes } => set_drained(&master, mode, nodes, false).await,
        cmd @ (Cmd::Hold { .. } | Cmd::Release { .. }) => {
            let (hold, ids) = match cmd {
                Cmd::Hold { ids } => (true, ids),
                Cmd::Release { ids } => (false, ids),
                _ => unreachable!("matched above"),
            };
            let sel = job_filter::parse_job_sel(&ids)
                .and_then(|s| s.ok_or_else(|| "name the jobs by id".to_string()))
                .unwrap_or_else(|e| bad_value(e));
            gang_cli::jobs::job_update::hold(&master, mode, sel, hold).await
        }
        Cmd::Update {
            id,
            time_limit,
            name,
        } => gang_cli::jobs::job_update::update(&master, mode, id, time_limit, name).await,
        Cmd::Completions { shell, command } => {
            gang_cli::args::shell_docs::completions(shell, command, &mut std::io::stdout());
            Ok(0)
        }
        Cmd::Man { dir } => {
            let pages = gang_cli::args::shell_docs::man_pages(&dir).map_err(|e| {
                CliError::other(format!("cannot write man pages to {}: {e}", dir.display()))
            })?;
            eprintln!(
                "gangctl: {} man pages written to {}",
                pages.len(),
                dir.display()
            );
            Ok(0)
        }
    }
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
    let (jobs, failed) = fetch_jobs(master, filter, state, all, limit).await?;
    mode.print(&JobsView(&jobs));
    Ok(if failed { 1 } else { 0 })
}

/// How many jobs a listing shows when not told (`--limit 0`).
const DEFAULT_LIMIT: usize = 1000;

/// The jobs [`list_jobs`] shows, and whether a named one could not be fetched.
async fn fetch_jobs(
    master: &str,
    filter: job_filter::JobFilter,
    state: Option<job_filter::States>,
    all: bool,
    limit: u32,
) -> Result<(Vec<gang_proto::v1::JobInfo>, bool), CliError> {
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
    let want = match (filter.sel == Some(JobSel::Last), limit) {
        (true, _) => 1,
        (false, 0) => DEFAULT_LIMIT,
        (false, n) => n as usize,
    };
    let listed = gang_cli::jobs::listing::list(&mut client, &states, want).await?;
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
