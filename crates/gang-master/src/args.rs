//! The master's command-line flags, and the layer they make over the config file: every
//! flag is the file key of the same name (dashes for underscores), `[connections]` keys
//! included.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gang_core::Shape;
use gang_master::config::parse_mesh;
use gang_master::connections::ConnectionsSection;
use gang_master::daemon_config::file::{FileConfig, TlsSection, WebSection};

/// The master: accepts jobs, places them on the mesh, launches them on the node agents.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
pub struct Args {
    /// TOML file with any of the options below (flags override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// gRPC address for clients and agents (port 0: any free port).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// The mesh, WxH.
    #[arg(long, value_parser = parse_mesh)]
    pub mesh: Option<Shape>,
    /// Where the state is kept: an SQLite database (a path; output logs go beside it), or
    /// etcd://HOST:PORT[,HOST:PORT...]/PREFIX: an etcd cluster shared by several masters,
    /// one of which leads while the others stand by (with --output-dir for the logs).
    #[arg(long, value_name = "PATH|etcd://...")]
    pub state: Option<PathBuf>,
    /// Where per-job output logs go [default: beside the SQLite database;
    /// gang-master.output with etcd].
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// With the state in etcd: the leader's lease in seconds (a dead leader is replaced
    /// about this long after it stopped answering; a stopped one at once) [default: 5].
    #[arg(long, value_name = "S")]
    pub etcd_lease_s: Option<u32>,
    /// With the state in etcd: how long one request to it may take [default: 3000].
    #[arg(long, value_name = "MS")]
    pub etcd_timeout_ms: Option<u32>,
    /// With the state in etcd: TLS to its members, whose certificates this CA signed.
    #[arg(long, value_name = "PEM")]
    pub etcd_ca: Option<PathBuf>,
    /// With --etcd-ca: this master's client certificate, for members that ask for one
    /// (etcd's --client-cert-auth); with --etcd-key.
    #[arg(long, value_name = "PEM")]
    pub etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert.
    #[arg(long, value_name = "PEM")]
    pub etcd_key: Option<PathBuf>,
    /// With the state in etcd: run even though etcd asks no client certificate of the
    /// master (--etcd-cert and --etcd-key). Only where the network to etcd is the
    /// masters' alone: whoever can write etcd can queue jobs there as any user.
    #[arg(long)]
    pub etcd_trusted_network: bool,
    /// Serve the reference portal at https://HOST:PORT/portal/ on the client TLS port
    /// (--listen), as `[web] portal = true`; its URL is logged at start.
    #[arg(long)]
    pub portal: bool,
    /// Maximum multiprogramming level: how many slices (rows of the matrix) take turns.
    #[arg(long)]
    pub mpl: Option<u32>,
    /// Time slot length in ms (1 ms at least): each slice runs this long in turn.
    #[arg(long)]
    pub quantum_ms: Option<u32>,
    /// How jobs that do not choose are switched out of their slices.
    #[arg(long, value_parser = ["stop", "priority", "none", "freeze"])]
    pub gang_mode: Option<String>,
    /// What happens to a job that deadlocks and does not choose (`prun --on-deadlock`):
    /// report it, or report it and fail the job.
    #[arg(long, value_parser = ["report", "kill"])]
    pub on_deadlock: Option<String>,
    /// What the agents serve the MPI libraries of jobs that do not choose (`prun --mpi`).
    #[arg(long, value_parser = ["auto", "pmi1", "pmi2", "pmix", "none"])]
    pub mpi: Option<String>,
    /// How far ahead a new slice table is published (ms).
    #[arg(long)]
    pub table_lead_ms: Option<u32>,
    /// The placer: where a job's rectangle goes (`--allocator`, its old name, is read too
    /// for one release).
    #[arg(long, alias = "allocator", value_parser = ["adaptive-scan", "first-fit", "best-fit"])]
    pub placer: Option<String>,
    #[arg(long, value_parser = ["none", "easy"])]
    pub backfill: Option<String>,
    /// The queue's order between users: fair-share (default: users take turns, those
    /// running less first) or fcfs (submission order only).
    #[arg(long, value_parser = ["fair-share", "fcfs"])]
    pub queue_order: Option<String>,
    /// How often agents that run ranks heartbeat [default: 500, times one per started
    /// 1,024 nodes of the mesh].
    #[arg(long)]
    pub heartbeat_ms: Option<u32>,
    /// An agent silent this long is down, and its jobs fail [default: 3000, scaled as
    /// --heartbeat-ms].
    #[arg(long)]
    pub node_timeout_ms: Option<u32>,
    /// How often an agent that runs no rank heartbeats (quiet liveness; 0: every
    /// --heartbeat-ms) [default: 5000, scaled as --heartbeat-ms].
    #[arg(long)]
    pub idle_heartbeat_ms: Option<u32>,
    /// An agent that runs no rank is down after this long silent [default: three idle
    /// heartbeats and the node timeout: 18000].
    #[arg(long)]
    pub idle_node_timeout_ms: Option<u32>,
    /// An agent that has had no answer of the master this long stops its ranks; until then
    /// they run and switch on its last table, so a master paused, restarting or failing
    /// over for less loses no job [default: 300000, or twice the node timeout if longer].
    #[arg(long)]
    pub agent_lease_ms: Option<u32>,
    /// After it starts or takes over, the master waits this long for an agent to report
    /// the ranks it runs before they count as lost (and only once other agents were heard
    /// meanwhile) [default: the node timeout and 15000, less than --agent-lease-ms: agents
    /// whose master hung take up to a call's 5 s deadline per master they try].
    #[arg(long)]
    pub adopt_timeout_ms: Option<u32>,
    /// Launches, signals and slice tables for more agents than this go through a tree of
    /// agents this wide; 0: the master calls every agent itself [default: 16].
    #[arg(long)]
    pub fanout_width: Option<u32>,
    /// Where a job's fences are gathered: agents (the default: among the job's agents
    /// over the order tree; the master hears one record a fence) or master.
    #[arg(long, value_parser = ["master", "agents"])]
    pub fences: Option<String>,
    /// How long one level of that tree may take before its head is routed around (a
    /// subtree of L levels: 2^L - 1 times this) [default: 20000].
    #[arg(long)]
    pub relay_hop_timeout_ms: Option<u32>,
    /// Grace between SIGTERM and SIGKILL when a job is cancelled.
    #[arg(long)]
    pub kill_grace_ms: Option<u32>,
    /// Once serving, write "grpc=ADDR", "agents=ADDR", "socket=PATH" and "metrics=ADDR"
    /// lines here.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Unix socket for local clients, identified by its peer credentials [default:
    /// /run/gang/master.sock].
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Address for agents (mutual TLS with node certificates) [default: 127.0.0.1:7472].
    #[arg(long)]
    pub agent_listen: Option<SocketAddr>,
    /// The cluster CA certificate [default: /etc/gang/tls/ca.pem].
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// The master's certificate (DNS master.gang) [default: /etc/gang/tls/master.pem].
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// Its key [default: /etc/gang/tls/master-key.pem].
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// The key tokens are signed with [default: beside the database].
    #[arg(long)]
    pub token_key: Option<PathBuf>,
    /// Let jobs run as root (uid 0); off by default.
    #[arg(long)]
    pub allow_root_jobs: bool,
    /// An admin user (may act on every job, drain and resume nodes); repeatable.
    #[arg(long = "admin")]
    pub admins: Vec<String>,
    #[arg(long, value_parser = ["human", "json"])]
    pub log_format: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `[connections]` of the config file, as flags (the file's keys, with dashes).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Connection limits ([connections] in the config)")]
pub struct ConnArgs {
    /// Client connections, socket and TCP together [default: what the open-file limit
    /// allows, less a reserve].
    #[arg(long)]
    pub max_client_connections: Option<usize>,
    /// Of those, kept for root and admins on the socket [default: 64].
    #[arg(long)]
    pub admin_reserve: Option<usize>,
    /// Connections one user may hold on the socket (admins: no limit) [default: 256].
    #[arg(long)]
    pub max_per_user: Option<usize>,
    /// Connections one address may hold on the client TCP port [default: 256].
    #[arg(long)]
    pub max_per_ip: Option<usize>,
    /// Agent connections [default: 4 per node + 64].
    #[arg(long)]
    pub max_agent_connections: Option<usize>,
    /// Connections one address may hold on the agent port [default: all the agent pool].
    #[arg(long)]
    pub max_agent_per_ip: Option<usize>,
    /// A connection with no request this long after its accept is closed [default: 10000].
    #[arg(long)]
    pub handshake_timeout_ms: Option<u64>,
    /// A connection with no open stream this long is closed [default: 300000].
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// The agent port's: an agent connection with no open stream this long is closed (a
    /// node beating a liveness head has nothing to tell the master between launches; it
    /// reconnects when it has) [default: 60000].
    #[arg(long)]
    pub agent_idle_timeout_ms: Option<u64>,
    /// HTTP/2 keepalive ping interval, to find dead peers [default: 60000].
    #[arg(long)]
    pub keepalive_interval_ms: Option<u64>,
    /// A peer that does not answer a ping this long is dropped [default: 20000].
    #[arg(long)]
    pub keepalive_timeout_ms: Option<u64>,
    /// Attach streams (prun, gangctl output) one user may hold open [default: 128].
    #[arg(long)]
    pub max_attaches_per_user: Option<usize>,
    /// Agent-port connections not yet vetted by a node certificate's call; past it, a
    /// newcomer closes the oldest [default: 1024].
    #[arg(long)]
    pub max_unvetted_agent_connections: Option<usize>,
    /// The same, from one address [default: 256].
    #[arg(long)]
    pub max_unvetted_agent_per_ip: Option<usize>,
}

impl Args {
    /// The flags given, as a layer of config keys (flags not given set nothing).
    pub fn layer(&self) -> FileConfig {
        let a = self.clone();
        let c = a.conn;
        FileConfig {
            listen: a.listen,
            metrics_listen: a.metrics_listen,
            mesh: a.mesh.map(|m| m.to_string()),
            state: a.state,
            output_dir: a.output_dir,
            etcd_lease_s: a.etcd_lease_s,
            etcd_timeout_ms: a.etcd_timeout_ms,
            etcd_ca: a.etcd_ca,
            etcd_cert: a.etcd_cert,
            etcd_key: a.etcd_key,
            etcd_trusted_network: a.etcd_trusted_network.then_some(true),
            mpl: a.mpl,
            placer: a.placer,
            backfill: a.backfill,
            queue_order: a.queue_order,
            heartbeat_ms: a.heartbeat_ms,
            node_timeout_ms: a.node_timeout_ms,
            idle_heartbeat_ms: a.idle_heartbeat_ms,
            idle_node_timeout_ms: a.idle_node_timeout_ms,
            agent_lease_ms: a.agent_lease_ms,
            adopt_timeout_ms: a.adopt_timeout_ms,
            kill_grace_ms: a.kill_grace_ms,
            log_format: a.log_format,
            quantum_ms: a.quantum_ms,
            gang_mode: a.gang_mode,
            on_deadlock: a.on_deadlock,
            mpi: a.mpi,
            table_lead_ms: a.table_lead_ms,
            fanout_width: a.fanout_width,
            fences: a.fences,
            relay_hop_timeout_ms: a.relay_hop_timeout_ms,
            socket: a.socket,
            agent_listen: a.agent_listen,
            tls: Some(TlsSection {
                ca: a.tls_ca,
                cert: a.tls_cert,
                key: a.tls_key,
            }),
            admins: (!a.admins.is_empty()).then_some(a.admins),
            admin_groups: None,
            allow_root_jobs: a.allow_root_jobs.then_some(true),
            token_key: a.token_key,
            token_ttl_s: None,
            token_max_ttl_s: None,
            limits: None,
            connections: Some(ConnectionsSection {
                max_client_connections: c.max_client_connections,
                admin_reserve: c.admin_reserve,
                max_per_user: c.max_per_user,
                max_per_ip: c.max_per_ip,
                max_agent_connections: c.max_agent_connections,
                max_agent_per_ip: c.max_agent_per_ip,
                handshake_timeout_ms: c.handshake_timeout_ms,
                idle_timeout_ms: c.idle_timeout_ms,
                agent_idle_timeout_ms: c.agent_idle_timeout_ms,
                keepalive_interval_ms: c.keepalive_interval_ms,
                keepalive_timeout_ms: c.keepalive_timeout_ms,
                max_attaches_per_user: c.max_attaches_per_user,
                max_unvetted_agent_connections: c.max_unvetted_agent_connections,
                max_unvetted_agent_per_ip: c.max_unvetted_agent_per_ip,
            }),
            web: a.portal.then_some(WebSection {
                allow_origins: None,
                portal: Some(true),
            }),
        }
    }
}
