//! `gang-master`: the gang scheduler's master daemon.

mod allocator;
mod args;

use clap::Parser;
use gang_master::daemon_config::DaemonConfig;
use gang_master::daemon_config::{layers, resolve};
use gang_master::notify;
use tracing::error;

use crate::args::Args;

/// What the master runs with and its log format: defaults, the file, the environment,
/// the flags (`config/layers.rs`), checked (`config/resolve.rs`).
fn configure(a: Args) -> anyhow::Result<(DaemonConfig, String)> {
    let settings = layers::merge(a.config.as_deref(), &a.layer())?;
    let (mut cfg, log) = resolve::resolve(settings)?;
    cfg.ready_file = a.ready_file;
    Ok((cfg, log))
}

fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

fn main() {
    allocator::no_transparent_huge_pages();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(allocator::give_back_when_idle)
        .build();
    match runtime {
        Ok(rt) => rt.block_on(serve()),
        Err(e) => {
            eprintln!("gang-master: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    }
}

async fn serve() {
    gang_proto::memory::keep_freed_memory();
    let (cfg, log) = match configure(Args::parse()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gang-master: {e:#}");
            std::process::exit(2);
        }
    };
    init_logs(&log);
    let mesh = cfg.master.mesh;
    notify::status(&format!(
        "opening {} and recovering jobs",
        cfg.state.display()
    ));
    let master = match gang_master::server::start(cfg).await {
        Ok(m) => m,
        Err(e) => {
            notify::status(&format!("cannot start: {e:#}"));
            eprintln!("gang-master: {e:#}");
            std::process::exit(1);
        }
    };
    // Only now: both ports are bound and every saved job is recovered, so a unit ordered
    // after this one (or a client told the master is up) finds it answering.
    let serving = format!(
        "serving gRPC on {}, metrics on {}, mesh {mesh}",
        master.grpc_addr, master.metrics_addr
    );
    notify::ready(&serving);
    let _watchdog = notify::spawn_watchdog(master.handle.clone(), serving);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        notify::stopping();
    };
    if let Err(e) = master
        .serve_until(stop, std::time::Duration::from_secs(2))
        .await
    {
        // Exit non-zero so that systemd restarts us: recovery rebuilds what was saved.
        notify::status(&format!("failed: {e:#}"));
        error!("{e:#}");
        eprintln!("gang-master: {e:#}");
        std::process::exit(1);
    }
    std::process::exit(0);
}
