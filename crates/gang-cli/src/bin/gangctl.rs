//! `gangctl`: look at and steer the gang cluster (jobs, nodes, slices, stats, cancel,
//! drain), or start a whole local cluster. The commands are `gang_cli::gangctl`'s; this
//! is the process around them: parsing, `gangctl start`'s early checks and signal
//! thread, the runtime and the exit code.

use std::io::Write;

use clap::Parser;
use gang_cli::gangctl::cli::{Cli, Cmd};
use gang_cli::gangctl::usage::usage_error;
use gang_cli::output::OutputMode;
use gang_cli::output::views::ErrorView;
use gang_cli::start::StartArgs;
use gang_local::check_mesh;
use gang_local::driver::signals::{StopSignals, catch_stop_signals};

fn main() {
    gang_cli::gangctl::shell_docs::complete::complete_if_asked();
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    let mode = cli.output;
    let signals = match &cli.command {
        Cmd::Start(args) => Some(prepare_start(args, mode)),
        _ => None,
    };
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
    let code = match rt.block_on(gang_cli::gangctl::run(cli, signals)) {
        Ok(code) => code,
        Err(e) => {
            mode.eprint(&ErrorView::of("gangctl", &e));
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// `gangctl start` before anything is started, or even looked for: a mesh it cannot
/// start is a usage error (exit 2), and its signals are taken over before the runtime or
/// any other thread exists (see gang_local::driver::signals).
fn prepare_start(args: &StartArgs, mode: OutputMode) -> StopSignals {
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
    match catch_stop_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gangctl: cannot take over SIGINT, SIGTERM and SIGHUP: {e}");
            std::process::exit(1);
        }
    }
}
