//! `gangctl` itself, above every command: its command line ([`cli`]), which names each
//! command's options, the dispatch of a parsed command line to the command that runs it
//! ([`run`], one small function a subcommand in `commands.rs`), its usage errors
//! ([`usage`]), and its completions and man pages ([`shell_docs`]).

pub mod cli;
mod commands;
pub mod shell_docs;
pub mod usage;

use gang_local::driver::signals::StopSignals;

use crate::connect::client_config;
use crate::error::CliError;
use cli::{Cli, Cmd, TokenCmd};
use commands as c;

/// Run a parsed `gangctl` command line: its exit code. `signals` are `gangctl start`'s,
/// taken over before any thread started.
pub async fn run(cli: Cli, signals: Option<StopSignals>) -> Result<i32, CliError> {
    let mode = cli.output;
    // `start` makes its own cluster and `certs` only writes files: neither needs an address.
    let master = match &cli.command {
        Cmd::Start(_)
        | Cmd::Certs(_)
        | Cmd::Completions { .. }
        | Cmd::Man { .. }
        | Cmd::Install(_) => String::new(),
        _ => client_config::master(cli.master.clone())?,
    };
    let m = master.as_str();
    match cli.command {
        Cmd::Start(args) => c::start(args, signals).await,
        Cmd::Jobs {
            ids,
            all,
            user,
            state,
            since,
            limit,
        } => {
            let mut listing = c::Listing::new(&ids, user, since, state, limit);
            listing.all = all;
            c::list_jobs(m, mode, listing).await
        }
        Cmd::Acct {
            mut ids,
            jobs,
            allocations,
            user,
            state,
            since,
            format,
            limit,
        } => {
            ids.extend(jobs);
            let listing = c::Listing::new(&ids, user, since, state, limit);
            c::acct(m, mode, listing, format, allocations).await
        }
        Cmd::Alloc { opts, command } => crate::alloc::alloc(m, opts, command).await,
        Cmd::Submit {
            opts,
            parsable,
            wrap,
            script,
            args,
        } => {
            // -N and -n of the command line that disagree are a usage error, as clap's own.
            if let Err(e) = opts.alloc.node_request() {
                usage::bad_value(e);
            }
            let script = c::script_source(wrap, script);
            crate::batch::submit(m, mode, script, &args, opts, parsable).await
        }
        Cmd::Job { id } => c::job(m, mode, c::one_named("job", &id)).await,
        Cmd::Cancel { ids, user, state } => c::cancel(m, mode, &ids, user, state).await,
        Cmd::Nodes => c::nodes(m, mode).await,
        Cmd::Slices { watch, interval_ms } => c::slices(m, mode, watch, interval_ms).await,
        Cmd::Stats => c::stats(m, mode).await,
        Cmd::Drain { nodes } => c::set_drained(m, mode, nodes, true).await,
        Cmd::Resume { nodes } => c::set_drained(m, mode, nodes, false).await,
        Cmd::Certs(cmd) => c::certs(cmd),
        Cmd::Token {
            ttl,
            save,
            revoke: None,
        } => c::token(m, ttl, save).await,
        Cmd::Token {
            revoke: Some(TokenCmd::Revoke { token, id, user }),
            ..
        } => c::revoke(m, token, id, user).await,
        Cmd::Attach {
            id,
            label,
            verbose,
            quiet,
        } => c::attach(m, &id, label, verbose, quiet).await,
        Cmd::Output {
            id,
            rank,
            stream,
            label,
        } => c::output(m, &id, rank, stream, label).await,
        Cmd::Hold { ids } => c::hold(m, mode, &ids, true).await,
        Cmd::Release { ids } => c::hold(m, mode, &ids, false).await,
        Cmd::Update {
            id,
            time_limit,
            name,
        } => {
            let named = c::one_named("update", &id);
            crate::jobs::job_update::update(m, mode, named, time_limit, name).await
        }
        Cmd::Completions { shell, command } => c::completions(shell, command),
        Cmd::Man { dir } => c::man(&dir),
        Cmd::Install(args) => shell_docs::install::install(&args),
    }
}
