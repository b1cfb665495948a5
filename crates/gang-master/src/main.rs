//! `gang-master`: the gang scheduler's master daemon.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gang_auth::pki::TlsFiles;
use gang_core::{AllocatorKind, Backfill, Shape};
use gang_core::{DeadlockPolicy, GangMode};
use gang_master::config::{
    AuthPolicy, DEFAULT_AGENT_LEASE_MS, DEFAULT_CLOCK_PROBE_MAX_MS, DEFAULT_FANOUT_WIDTH,
    DEFAULT_HEARTBEAT_MS, DEFAULT_HOP_TIMEOUT_MS, DEFAULT_IDLE_HEARTBEAT_MS, DEFAULT_MPL,
    DEFAULT_NODE_TIMEOUT_MS, DEFAULT_QUANTUM_MS, DEFAULT_SOCKET, DEFAULT_TABLE_LEAD_MS,
    DEFAULT_TOKEN_MAX_TTL_S, DEFAULT_TOKEN_TTL_S, Fanout, FileConfig, Limits, LivenessTimes,
    MasterConfig, check_liveness, default_adopt_timeout, default_idle_node_timeout, liveness_scale,
    parse_mesh,
};
use gang_master::connections::{ConnLimits, ConnectionsSection};
use gang_master::notify;
use tracing::error;

/// The master: accepts jobs, places them on the mesh, launches them on the node agents.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TOML file with any of the options below (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// gRPC address for clients and agents (port 0: any free port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// The mesh, WxH.
    #[arg(long, value_parser = parse_mesh)]
    mesh: Option<Shape>,
    /// Where the state is kept: an SQLite database (a path; output logs go beside it), or
    /// etcd://HOST:PORT[,HOST:PORT...]/PREFIX: an etcd cluster shared by several masters,
    /// one of which leads while the others stand by (with --output-dir for the logs).
    #[arg(long, value_name = "PATH|etcd://...")]
    state: Option<PathBuf>,
    /// Where per-job output logs go [default: beside the SQLite database;
    /// gang-master.output with etcd].
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// With the state in etcd: the leader's lease in seconds (a dead leader is replaced
    /// about this long after it stopped answering; a stopped one at once) [default: 5].
    #[arg(long, value_name = "S")]
    etcd_lease_s: Option<u32>,
    /// With the state in etcd: how long one request to it may take [default: 3000].
    #[arg(long, value_name = "MS")]
    etcd_timeout_ms: Option<u32>,
    /// With the state in etcd: TLS to its members, whose certificates this CA signed.
    #[arg(long, value_name = "PEM")]
    etcd_ca: Option<PathBuf>,
    /// With --etcd-ca: this master's client certificate, for members that ask for one
    /// (etcd's --client-cert-auth); with --etcd-key.
    #[arg(long, value_name = "PEM")]
    etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert.
    #[arg(long, value_name = "PEM")]
    etcd_key: Option<PathBuf>,
    /// With the state in etcd: run even though etcd asks no client certificate of the
    /// master (--etcd-cert and --etcd-key). Only where the network to etcd is the
    /// masters' alone: whoever can write etcd can queue jobs there as any user.
    #[arg(long)]
    etcd_trusted_network: bool,
    /// Maximum multiprogramming level: how many slices (rows of the matrix) take turns.
    #[arg(long)]
    mpl: Option<u32>,
    /// Time slot length in ms (1 ms at least): each slice runs this long in turn.
    #[arg(long)]
    quantum_ms: Option<u32>,
    /// How jobs that do not choose are switched out of their slices.
    #[arg(long, value_parser = ["stop", "priority", "none", "freeze"])]
    gang_mode: Option<String>,
    /// What happens to a job that deadlocks and does not choose (`prun --on-deadlock`):
    /// report it, or report it and fail the job.
    #[arg(long, value_parser = ["report", "kill"])]
    on_deadlock: Option<String>,
    /// What the agents serve the MPI libraries of jobs that do not choose (`prun --mpi`).
    #[arg(long, value_parser = ["auto", "pmi1", "pmi2", "pmix", "none"])]
    mpi: Option<String>,
    /// How far ahead a new slice table is published (ms).
    #[arg(long)]
    table_lead_ms: Option<u32>,
    #[arg(long, value_parser = ["adaptive-scan", "first-fit", "best-fit"])]
    allocator: Option<String>,
    #[arg(long, value_parser = ["none", "easy"])]
    backfill: Option<String>,
    /// The queue's order between users: fair-share (default: users take turns, those
    /// running less first) or fcfs (submission order only).
    #[arg(long, value_parser = ["fair-share", "fcfs"])]
    queue_order: Option<String>,
    /// How often agents that run ranks heartbeat [default: 500, times one per started
    /// 1,024 nodes of the mesh].
    #[arg(long)]
    heartbeat_ms: Option<u32>,
    /// An agent silent this long is down, and its jobs fail [default: 3000, scaled as
    /// --heartbeat-ms].
    #[arg(long)]
    node_timeout_ms: Option<u32>,
    /// How often an agent that runs no rank heartbeats (quiet liveness; 0: every
    /// --heartbeat-ms) [default: 5000, scaled as --heartbeat-ms].
    #[arg(long)]
    idle_heartbeat_ms: Option<u32>,
    /// An agent that runs no rank is down after this long silent [default: three idle
    /// heartbeats and the node timeout: 18000].
    #[arg(long)]
    idle_node_timeout_ms: Option<u32>,
    /// An agent that has had no answer of the master this long stops its ranks; until then
    /// they run and switch on its last table, so a master paused, restarting or failing
    /// over for less loses no job [default: 300000, or twice the node timeout if longer].
    #[arg(long)]
    agent_lease_ms: Option<u32>,
    /// After it starts or takes over, the master waits this long for an agent to report
    /// the ranks it runs before they count as lost (and only once other agents were heard
    /// meanwhile) [default: the node timeout and 15000, less than --agent-lease-ms: agents
    /// whose master hung take up to a call's 5 s deadline per master they try].
    #[arg(long)]
    adopt_timeout_ms: Option<u32>,
    /// Launches, signals and slice tables for more agents than this go through a tree of
    /// agents this wide; 0: the master calls every agent itself [default: 16].
    #[arg(long)]
    fanout_width: Option<u32>,
    /// Where a job's fences are gathered: agents (the default: among the job's agents
    /// over the relay tree; the master hears one record a fence) or master.
    #[arg(long, value_parser = ["master", "agents"])]
    fences: Option<String>,
    /// How long one level of that tree may take before its head is routed around (a
    /// subtree of L levels: 2^L - 1 times this) [default: 20000].
    #[arg(long)]
    relay_hop_timeout_ms: Option<u32>,
    /// Grace between SIGTERM and SIGKILL when a job is cancelled.
    #[arg(long)]
    kill_grace_ms: Option<u32>,
    /// Once serving, write "grpc=ADDR", "agents=ADDR", "socket=PATH" and "metrics=ADDR"
    /// lines here.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Unix socket for local clients, identified by its peer credentials [default:
    /// /run/gang/master.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Address for agents (mutual TLS with node certificates) [default: 127.0.0.1:7472].
    #[arg(long)]
    agent_listen: Option<SocketAddr>,
    /// The cluster CA certificate [default: /etc/gang/tls/ca.pem].
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The master's certificate (DNS master.gang) [default: /etc/gang/tls/master.pem].
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// Its key [default: /etc/gang/tls/master-key.pem].
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// The key tokens are signed with [default: beside the database].
    #[arg(long)]
    token_key: Option<PathBuf>,
    /// Let jobs run as root (uid 0); off by default.
    #[arg(long)]
    allow_root_jobs: bool,
    /// An admin user (may act on every job, drain and resume nodes); repeatable.
    #[arg(long = "admin")]
    admins: Vec<String>,
    #[arg(long, value_parser = ["human", "json"])]
    log_format: Option<String>,
    #[command(flatten)]
    conn: ConnArgs,
}

/// `[connections]` of the config file, as flags (the file's keys, with dashes).
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Connection limits ([connections] in the config)")]
struct ConnArgs {
    /// Client connections, socket and TCP together [default: what the open-file limit
    /// allows, less a reserve].
    #[arg(long)]
    max_client_connections: Option<usize>,
    /// Of those, kept for root and admins on the socket [default: 64].
    #[arg(long)]
    admin_reserve: Option<usize>,
    /// Connections one user may hold on the socket (admins: no limit) [default: 256].
    #[arg(long)]
    max_per_user: Option<usize>,
    /// Connections one address may hold on the client TCP port [default: 256].
    #[arg(long)]
    max_per_ip: Option<usize>,
    /// Agent connections [default: 4 per node + 64].
    #[arg(long)]
    max_agent_connections: Option<usize>,
    /// Connections one address may hold on the agent port [default: all the agent pool].
    #[arg(long)]
    max_agent_per_ip: Option<usize>,
    /// A connection with no request this long after its accept is closed [default: 10000].
    #[arg(long)]
    handshake_timeout_ms: Option<u64>,
    /// A connection with no open stream this long is closed [default: 300000].
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// HTTP/2 keepalive ping interval, to find dead peers [default: 60000].
    #[arg(long)]
    keepalive_interval_ms: Option<u64>,
    /// A peer that does not answer a ping this long is dropped [default: 20000].
    #[arg(long)]
    keepalive_timeout_ms: Option<u64>,
    /// Attach streams (prun, gangctl output) one user may hold open [default: 128].
    #[arg(long)]
    max_attaches_per_user: Option<usize>,
    /// Agent-port connections not yet vetted by a node certificate's call; past it, a
    /// newcomer closes the oldest [default: 1024].
    #[arg(long)]
    max_unvetted_agent_connections: Option<usize>,
    /// The same, from one address [default: 256].
    #[arg(long)]
    max_unvetted_agent_per_ip: Option<usize>,
}

/// The connection limits: defaults, then the file's `[connections]`, then the flags.
fn connections(a: &ConnArgs, f: &FileConfig) -> ConnLimits {
    let flags = ConnectionsSection {
        max_client_connections: a.max_client_connections,
        admin_reserve: a.admin_reserve,
        max_per_user: a.max_per_user,
        max_per_ip: a.max_per_ip,
        max_agent_connections: a.max_agent_connections,
        max_agent_per_ip: a.max_agent_per_ip,
        handshake_timeout_ms: a.handshake_timeout_ms,
        idle_timeout_ms: a.idle_timeout_ms,
        keepalive_interval_ms: a.keepalive_interval_ms,
        keepalive_timeout_ms: a.keepalive_timeout_ms,
        max_attaches_per_user: a.max_attaches_per_user,
        max_unvetted_agent_connections: a.max_unvetted_agent_connections,
        max_unvetted_agent_per_ip: a.max_unvetted_agent_per_ip,
    };
    ConnLimits::default()
        .with(&f.connections.clone().unwrap_or_default())
        .with(&flags)
}

fn resolve(a: Args) -> anyhow::Result<(MasterConfig, String)> {
    let f = match &a.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let connections = connections(&a.conn, &f);
    let mesh = match (a.mesh, &f.mesh) {
        (Some(m), _) => m,
        (None, Some(m)) => parse_mesh(m).map_err(anyhow::Error::msg)?,
        (None, None) => {
            anyhow::bail!("the mesh is required: --mesh WxH or mesh = \"WxH\" in the config")
        }
    };
    let mpl = a.mpl.or(f.mpl).unwrap_or(DEFAULT_MPL);
    if mpl == 0 {
        anyhow::bail!("mpl must be at least 1");
    }
    let quantum_ms = a.quantum_ms.or(f.quantum_ms).unwrap_or(DEFAULT_QUANTUM_MS);
    if !(1..=60_000).contains(&quantum_ms) {
        anyhow::bail!("quantum_ms must be between 1 and 60000, got {quantum_ms}");
    }
    let gang_mode: GangMode = a
        .gang_mode
        .or(f.gang_mode)
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .transpose()?
        .unwrap_or_default();
    let on_deadlock: DeadlockPolicy = a
        .on_deadlock
        .or(f.on_deadlock)
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .transpose()?
        .unwrap_or_default();
    let mpi: gang_master::job::Mpi = a
        .mpi
        .or(f.mpi)
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .transpose()?
        .unwrap_or(gang_master::job::Mpi::CLUSTER_DEFAULT);
    let allocator: AllocatorKind = a
        .allocator
        .or(f.allocator)
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .transpose()?
        .unwrap_or_default();
    let backfill: Backfill = a
        .backfill
        .or(f.backfill)
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .transpose()?
        .unwrap_or(Backfill::Easy);
    let tls_file = |flag: Option<PathBuf>, file: Option<PathBuf>, name: &str| {
        flag.or(file)
            .unwrap_or_else(|| PathBuf::from("/etc/gang/tls").join(name))
    };
    let ft = f.tls.clone().unwrap_or_default();
    let tls = TlsFiles {
        ca: tls_file(a.tls_ca, ft.ca, "ca.pem"),
        cert: tls_file(a.tls_cert, ft.cert, "master.pem"),
        key: tls_file(a.tls_key, ft.key, "master-key.pem"),
    };
    let mut admins = f.admins.clone().unwrap_or_default();
    admins.extend(a.admins);
    let admin_gids = f
        .admin_groups
        .iter()
        .flatten()
        .map(|g| match nix::unistd::Group::from_name(g) {
            Ok(Some(g)) => Ok(g.gid.as_raw()),
            Ok(None) => anyhow::bail!("admin group {g:?} is not a group on this host"),
            Err(e) => anyhow::bail!("cannot look up admin group {g:?}: {e}"),
        })
        .collect::<anyhow::Result<Vec<u32>>>()?;
    let token_max_ttl_s = f.token_max_ttl_s.unwrap_or(DEFAULT_TOKEN_MAX_TTL_S);
    let auth = AuthPolicy {
        admins,
        admin_gids,
        allow_root_jobs: a.allow_root_jobs || f.allow_root_jobs.unwrap_or(false),
        token_ttl_s: f
            .token_ttl_s
            .unwrap_or(DEFAULT_TOKEN_TTL_S)
            .min(token_max_ttl_s),
        token_max_ttl_s,
    };
    let state = a
        .state
        .or(f.state.clone())
        .unwrap_or_else(|| PathBuf::from("gang-master.db"));
    // `etcd://...`: the state in etcd; the path default stands for what lives beside it
    // (the token key, unless set; output logs, unless --output-dir).
    let (state, mut etcd) = match state.to_str() {
        Some(s) if s.starts_with("etcd://") => (
            PathBuf::from("gang-master.db"),
            Some(s.parse::<gang_etcd::Target>()?),
        ),
        _ => (state, None),
    };
    let etcd_ca = a.etcd_ca.or(f.etcd_ca.clone());
    let etcd_cert = a.etcd_cert.or(f.etcd_cert.clone());
    let etcd_key = a.etcd_key.or(f.etcd_key.clone());
    // Like the other etcd_* keys, read only when the state is in etcd.
    match (&mut etcd, &etcd_ca, &etcd_cert, &etcd_key) {
        (None, ..) | (_, None, None, None) => {}
        (Some(_), None, ..) => anyhow::bail!(
            "etcd_cert and etcd_key need etcd_ca: the CA that signed the etcd members' certificates"
        ),
        (Some(_), Some(_), Some(_), None) | (Some(_), Some(_), None, Some(_)) => {
            anyhow::bail!("etcd_cert and etcd_key go together")
        }
        (Some(t), Some(ca), cert, key) => {
            let pair = cert.as_deref().zip(key.as_deref());
            t.tls = Some(gang_etcd::Tls::read(ca, pair)?);
        }
    }
    let trusted = a.etcd_trusted_network || f.etcd_trusted_network.unwrap_or(false);
    if let Some(t) = &etcd
        && t.tls.as_ref().is_none_or(|tls| tls.identity.is_none())
        && !trusted
    {
        anyhow::bail!(
            "etcd at {} is reached without a client certificate: anyone who can write it \
             can queue jobs there to run as any user. Give the master its certificate \
             (--etcd-ca, --etcd-cert, --etcd-key, with etcd run with --client-cert-auth), \
             or, if the network to etcd is the masters' alone, say so with \
             --etcd-trusted-network (etcd_trusted_network = true)",
            t.endpoints.join(",")
        );
    }
    let etcd_lease_s = a
        .etcd_lease_s
        .or(f.etcd_lease_s)
        .unwrap_or(gang_master::config::DEFAULT_ETCD_LEASE_S);
    if etcd_lease_s == 0 {
        anyhow::bail!("--etcd-lease-s must be at least 1");
    }
    let etcd_timeout_ms = a
        .etcd_timeout_ms
        .or(f.etcd_timeout_ms)
        .unwrap_or(gang_master::config::DEFAULT_ETCD_TIMEOUT_MS)
        .max(1);
    let output_dir = a.output_dir.or(f.output_dir.clone());
    let token_key = a
        .token_key
        .or(f.token_key.clone())
        .unwrap_or_else(|| state.with_extension("token-key"));
    let scale = liveness_scale(mesh.area());
    let heartbeat_ms = a
        .heartbeat_ms
        .or(f.heartbeat_ms)
        .unwrap_or(DEFAULT_HEARTBEAT_MS * scale);
    let node_timeout_ms = a
        .node_timeout_ms
        .or(f.node_timeout_ms)
        .unwrap_or(DEFAULT_NODE_TIMEOUT_MS * scale);
    let idle_heartbeat_ms = a
        .idle_heartbeat_ms
        .or(f.idle_heartbeat_ms)
        .unwrap_or(DEFAULT_IDLE_HEARTBEAT_MS * scale);
    let idle_node_timeout_ms = a
        .idle_node_timeout_ms
        .or(f.idle_node_timeout_ms)
        .unwrap_or_else(|| default_idle_node_timeout(idle_heartbeat_ms, node_timeout_ms));
    let agent_lease_ms = a
        .agent_lease_ms
        .or(f.agent_lease_ms)
        .unwrap_or_else(|| DEFAULT_AGENT_LEASE_MS.max(node_timeout_ms.saturating_mul(2)));
    let adopt_timeout_ms = a
        .adopt_timeout_ms
        .or(f.adopt_timeout_ms)
        .unwrap_or_else(|| default_adopt_timeout(node_timeout_ms, agent_lease_ms));
    check_liveness(&LivenessTimes {
        heartbeat_ms,
        node_timeout_ms,
        idle_heartbeat_ms,
        idle_node_timeout_ms,
        agent_lease_ms,
        adopt_timeout_ms,
    })
    .map_err(anyhow::Error::msg)?;
    let web_origins = f
        .web
        .clone()
        .and_then(|w| w.allow_origins)
        .unwrap_or_default();
    let web_portal = f.web.as_ref().and_then(|w| w.portal).unwrap_or(false);
    for o in &web_origins {
        gang_master::config::check_origin(o).map_err(anyhow::Error::msg)?;
    }
    let fanout = Fanout {
        width: a
            .fanout_width
            .or(f.fanout_width)
            .unwrap_or(DEFAULT_FANOUT_WIDTH),
        hop_timeout_ms: a
            .relay_hop_timeout_ms
            .or(f.relay_hop_timeout_ms)
            .unwrap_or(DEFAULT_HOP_TIMEOUT_MS),
        fences_among_agents: match a.fences.or(f.fences.clone()).as_deref() {
            None | Some("agents") => true,
            Some("master") => false,
            Some(other) => {
                anyhow::bail!("fences = {other:?} in the config file: expected master or agents")
            }
        },
    }
    .check()
    .map_err(anyhow::Error::msg)?;
    let cfg = MasterConfig {
        fanout,
        listen: a
            .listen
            .or(f.listen)
            .unwrap_or_else(|| "127.0.0.1:7470".parse().expect("literal")),
        metrics_listen: a
            .metrics_listen
            .or(f.metrics_listen)
            .unwrap_or_else(|| "127.0.0.1:7471".parse().expect("literal")),
        mesh,
        state,
        etcd,
        etcd_lease_s,
        etcd_timeout_ms,
        output_dir,
        mpl,
        allocator,
        backfill,
        fair_share: match a.queue_order.or(f.queue_order).as_deref() {
            None | Some("fair-share") => true,
            Some("fcfs") => false,
            Some(other) => anyhow::bail!(
                "queue_order = {other:?} in the config file: expected fair-share or fcfs"
            ),
        },
        heartbeat_ms,
        node_timeout_ms,
        idle_heartbeat_ms,
        idle_node_timeout_ms,
        agent_lease_ms,
        adopt_timeout_ms,
        clock_probe_max_ms: DEFAULT_CLOCK_PROBE_MAX_MS * scale,
        kill_grace_ms: a.kill_grace_ms.or(f.kill_grace_ms).unwrap_or(3000),
        ready_file: a.ready_file,
        quantum_ms,
        gang_mode,
        on_deadlock,
        mpi,
        table_lead_ms: a
            .table_lead_ms
            .or(f.table_lead_ms)
            .unwrap_or(DEFAULT_TABLE_LEAD_MS),
        socket: a
            .socket
            .or(f.socket.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
        agent_listen: a
            .agent_listen
            .or(f.agent_listen)
            .unwrap_or_else(|| "127.0.0.1:7472".parse().expect("literal")),
        tls,
        auth,
        token_key,
        limits: Limits::default().with(&f.limits.clone().unwrap_or_default()),
        connections,
        web_origins,
        web_portal,
    };
    let log = a
        .log_format
        .or(f.log_format)
        .unwrap_or_else(|| "human".into());
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

#[tokio::main]
async fn main() {
    gang_proto::memory::keep_freed_memory();
    let (cfg, log) = match resolve(Args::parse()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gang-master: {e:#}");
            std::process::exit(2);
        }
    };
    init_logs(&log);
    let mesh = cfg.mesh;
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
