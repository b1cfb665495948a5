//! `gang-agent`: parse the configuration, start the agent, run until SIGTERM or SIGINT,
//! then kill and reap every rank and exit 0.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use gang_agent::{AgentConfig, Flags, LogFormat, notify};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

/// mimalloc (v2), as the master: an agent's hops (a fence's part going up, an order
/// forwarded) are small messages whose buffers and tasks glibc's malloc spent a fifth of
/// the agent's CPU on. At 1,024 played ranks the fleet's CPU a fence fell by a fifth to
/// a third, and the fence's median from 60-69 ms to 43-48 ms (benches/README.md, issue
/// 37's eighth part). C code in the process (the PMIx server) keeps glibc's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(gang_agent::guard::GUARD_ARG) {
        gang_agent::guard::run();
    }
    gang_proto::memory::keep_freed_memory();
    // The PMIx server library reads which security modules to open from its environment
    // when it starts (`gang_pmix::SECURITY_MODULE` says why only one).
    let (k, v) = gang_pmix::SERVER_SECURITY_ENV;
    // SAFETY: no other thread exists yet (the runtime and the PMIx server start below).
    unsafe { std::env::set_var(k, v) };
    // Bad flags: clap prints the usage and exits 2.
    let flags = Flags::parse();
    let block = flags.emulate_nodes;
    let cfgs = match flags.resolve() {
        // Emulated nodes start no process: no guard.
        #[cfg(feature = "emulate")]
        Ok(cfg) if cfg.emulate => {
            gang_agent::emulate::fleet::node_configs(&cfg, block.unwrap_or((1, 1)))
        }
        #[cfg(not(feature = "emulate"))]
        Ok(cfg) if cfg.emulate => {
            let _ = block;
            eprintln!("gang-agent: --emulate: this agent was built without the emulate feature");
            return ExitCode::from(2);
        }
        Ok(mut cfg) => {
            // Ranks' process groups outlive a killed agent unless its guard kills them.
            cfg.guard_exe = std::env::current_exe().ok();
            vec![cfg]
        }
        Err(e) => {
            eprintln!("gang-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = &cfgs[0];
    init_logging(cfg.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cfgs))
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in a launcher's log file.
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn run(cfgs: Vec<AgentConfig>) -> ExitCode {
    // Install the handlers before any rank exists, so that no SIGTERM can end the agent
    // the default way and leave ranks behind.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            error!("cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (coord, master, n) = (cfgs[0].coord, cfgs[0].master.clone(), cfgs.len());
    let ready_file = cfgs[0].ready_file.clone();
    let emulated = cfgs[0].emulate;
    let agents = match gang_agent::agent::start_all(cfgs).await {
        Ok(agents) => agents,
        Err(e) => {
            notify::status(&format!("cannot start: {e:#}"));
            error!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    let serving = if n == 1 {
        format!(
            "node {coord}: NodeAgent on {}, master {master}",
            agents[0].addr
        )
    } else {
        format!("{n} emulated nodes from {coord}, master {master}")
    };
    if emulated && let Some(path) = &ready_file {
        // One file for the whole block, once every node is bound.
        if let Err(e) = gang_agent::agent::write_ready_file(path, agents[0].addr) {
            error!("cannot write the ready file {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    notify::ready(&serving);
    let watchdog = notify::spawn_watchdog(agents[0].node.ranks.clone(), serving);
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = int.recv() => info!("SIGINT: shutting down"),
    }
    notify::stopping(agents.iter().map(|a| a.node.ranks.len()).sum());
    // systemd stops watching when the unit leaves the running state (STOPPING=1 or its
    // own stop), and TimeoutStopSec= bounds the rest; pinging on would only be noise.
    if let Some(w) = watchdog {
        w.abort();
    }
    // Side by side: each waits up to seconds for its master to hear its last reports.
    let mut stopping = tokio::task::JoinSet::new();
    for agent in agents {
        stopping.spawn(agent.shutdown());
    }
    while stopping.join_next().await.is_some() {}
    ExitCode::SUCCESS
}
