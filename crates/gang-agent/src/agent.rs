//! Putting the agent together: check the TLS files, bind the NodeAgent server (mutual
//! TLS, the master only), announce the port, then start the registry session, the uplink
//! and the master's lease. `AgentHandle::shutdown` takes it all down without leaving a rank behind.
//!
//! This is also where the clock probes and the switch reports get their RPCs
//! (`registry_client::probe_clock`, `report_switches`): `clock` and `switch` take them as
//! functions and import nothing above themselves.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gang_proto::v1::node_agent_server::NodeAgentServer;
use gang_proto::v1::node_relay_server::NodeRelayServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::ClientTlsConfig;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::error::Coord;
use crate::guard::Guard;
use crate::launch::LaunchPolicy;
use crate::master_link::lease;
use crate::msg::MsgHub;
use crate::node::Node;
use crate::output::{Outbox, OutboxConfig, Spools};
use crate::peers::PeerPool;
use crate::rt::clock::{self, Clock, ClockMode};
use crate::rt::host_clock;
use crate::service::AgentService;
use crate::session::registry_client::{self, RegistryClient};
use crate::session::thread::{SessionParts, SessionThread};
use crate::switch::{SwitchOptions, Switcher, report};
use crate::tls::{NodeTls, only_the_cluster, only_the_master};
use crate::tree::orders::OrderTree;

/// How long shutdown waits for SIGKILLed ranks to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(5);
/// How long shutdown gives the uplink to deliver the last exit reports (best effort: the
/// master may be down too).
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    /// Where the NodeAgent service is bound.
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    tasks: Tasks,
    guard: Option<Arc<Guard>>,
}

/// The agent's background tasks, besides the server.
#[derive(Debug)]
struct Tasks {
    session: Session,
    uplink: JoinHandle<()>,
    /// Clock probes (None with `clock = "host"`).
    probes: Option<JoinHandle<()>>,
    reports: JoinHandle<()>,
    lease: JoinHandle<()>,
}

/// Where the registry session runs.
#[derive(Debug)]
enum Session {
    /// On a thread of its own with its own connection (`session::thread`): a real node.
    Thread(SessionThread),
    /// On the process's session runtime, over the uplink's connection (which that runtime
    /// drives): an emulated node, whose second connection would only cost the master a
    /// descriptor (a 10,000-node fleet would need 20,000 for sessions and uplinks alone).
    Task(JoinHandle<()>),
}

/// The runtime of every emulated node's registry session in this process: one thread,
/// started with the first node, for the life of the process. (A real node gives its
/// session a thread and a connection of its own: `session::thread`.)
fn emulated_sessions() -> &'static tokio::runtime::Handle {
    static SESSIONS: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    SESSIONS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the emulated nodes' session runtime");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("gang-sessions".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("the emulated nodes' session thread");
        handle
    })
}

/// Start an agent: check its certificate, bind, write the ready file, then register in
/// the background (the master may not be up yet; the session retries).
pub async fn start(cfg: AgentConfig) -> anyhow::Result<AgentHandle> {
    raise_fd_limit();
    let tls = NodeTls::load(&cfg.tls, cfg.coord)
        .with_context(|| format!("node {}: refusing to start", cfg.coord))?;
    // Both TLS configurations are built (keys parsed and matched) before anything runs.
    let server = tonic::transport::Server::builder()
        .tls_config(tls.server())
        .with_context(|| {
            format!(
                "node {}: refusing to start: cannot use the TLS files {}, {} and {} (is the CA file a certificate, and does the key belong to the certificate?)",
                cfg.coord,
                cfg.tls.ca.display(),
                cfg.tls.cert.display(),
                cfg.tls.key.display()
            )
        })?;
    let session_tls = tls.client();
    // An emulated node's one connection is driven by the process's session runtime, so
    // that its heartbeats do not queue behind the launches and order-tree forwards of a thousand nodes.
    let client = {
        let _driven_by = cfg.emulate.then(|| emulated_sessions().enter());
        registry_client::connect(&cfg.master, tls.client())
            .with_context(|| format!("master {} with this node's TLS files", cfg.master))?
    };
    let listener = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let addr = listener.local_addr().context("bound address")?;
    let clock = Clock::new(cfg.clock);
    if cfg.clock == ClockMode::Host {
        info!("clock: trusting the host clock (offset 0)");
    }
    let switch = Switcher::start(
        cfg.coord,
        Arc::clone(&clock),
        &SwitchOptions {
            freezer: cfg.freezer.clone(),
            rt_priority: cfg.rt_priority,
            spin: cfg.switch_spin,
            ..SwitchOptions::default()
        },
    )
    .context("cannot start the switch thread")?;
    let node = Node::new(
        cfg.coord,
        cfg.kill_grace,
        LaunchPolicy {
            allow_root: cfg.allow_root,
            env_allow: cfg.env_allow.clone(),
            emulate: cfg.emulate,
        },
        Arc::clone(&switch),
        Arc::clone(&clock),
        MsgHub::new(cfg.msg_dir.clone(), cfg.coord, Arc::clone(&clock)),
        outbox_for(&cfg)?,
    );
    node.msg.set_master(client.clone());
    let guard = start_guard(&cfg, &node)?;
    let address = advertised_address(addr);
    let peers = Arc::new(PeerPool::new(tls.peer_tls()));
    node.msg.set_peers(Arc::clone(&peers));
    node.exits.set_peers(Arc::clone(&peers));
    // Its own pool: the session's runtime drives the channels to liveness heads.
    node.liveness
        .set_peers(Arc::new(PeerPool::new(tls.peer_tls())));
    node.msg.set_address(address.clone());
    let order_tree = OrderTree::new(Arc::clone(&node), peers, address.clone());
    let (stop_server, server) = serve(server, listener, &node, cfg.coord, order_tree);
    if let Some(path) = &cfg.ready_file {
        write_ready_file(path, addr)
            .with_context(|| format!("cannot write the ready file {}", path.display()))?;
    }
    info!(
        node = %cfg.coord,
        listen = %addr,
        %address,
        master = %cfg.master,
        cert = %cfg.tls.cert.display(),
        allow_root = cfg.allow_root,
        "agent started"
    );
    let tasks = Tasks::spawn(&cfg, (client, session_tls), &node, switch, clock, address)?;
    Ok(AgentHandle {
        addr,
        node,
        stop_server,
        server,
        tasks,
        guard,
    })
}

/// The rank guard, where the configuration names its binary: every rank's group is
/// reported to it from now on.
fn start_guard(cfg: &AgentConfig, node: &Node) -> anyhow::Result<Option<Arc<Guard>>> {
    let Some(exe) = &cfg.guard_exe else {
        return Ok(None);
    };
    let g = Arc::new(
        Guard::spawn(exe)
            .with_context(|| format!("cannot start the rank guard {}", exe.display()))?,
    );
    node.ranks.set_guard(Arc::clone(&g));
    Ok(Some(g))
}

/// Serve `NodeAgent` on `listener`, to the master only, and `NodeRelay`, to the master and
/// the other nodes; the sender stops it.
fn serve(
    mut server: tonic::transport::Server,
    listener: TcpListener,
    node: &Arc<Node>,
    coord: Coord,
    order_tree: OrderTree,
) -> (
    oneshot::Sender<()>,
    JoinHandle<Result<(), tonic::transport::Error>>,
) {
    /// How long the listener waits after a failed accept (EMFILE: the descriptors are out).
    const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
    let (stop_server, stopped) = oneshot::channel::<()>();
    // Anyone who reaches the port may connect; until the master's or a node's certificate
    // calls on a connection, it may be closed for a newcomer (`gang_listen`): a user's
    // flood of connections never takes the descriptors a launch needs, nor keeps the
    // master out.
    let vetting = gang_listen::Vetting::new(LISTENER_LIMITS);
    let incoming = {
        let vetting = Arc::clone(&vetting);
        TcpListenerStream::new(listener)
            .filter_map(move |conn| match conn {
                Ok(stream) => {
                    // Probes time round trips: do not let Nagle hold small replies back.
                    let _ = stream.set_nodelay(true);
                    let peer = stream.peer_addr().ok()?;
                    Some(Ok(gang_listen::Vetted::new(stream, vetting.enter(peer))))
                }
                Err(e) => Some(Err(e)),
            })
            // Out of descriptors (or another accept error that will not clear by itself):
            // wait a moment before accepting again, rather than spin.
            .then(|conn| async move {
                if conn.is_err() {
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
                conn
            })
    };
    let service = {
        let vetting = Arc::clone(&vetting);
        NodeAgentServer::with_interceptor(AgentService::new(Arc::clone(node)), move |request| {
            only_the_master(coord, &request)?;
            vet(&vetting, &request)?;
            Ok(request)
        })
    };
    let order_tree = tonic::service::interceptor::InterceptedService::new(
        NodeRelayServer::new(order_tree)
            .max_decoding_message_size(crate::peers::MAX_MESSAGE)
            .max_encoding_message_size(crate::peers::MAX_MESSAGE),
        move |request: tonic::Request<()>| {
            only_the_cluster(coord, &request)?;
            vet(&vetting, &request)?;
            Ok(request)
        },
    );
    let server = server
        .add_service(service)
        .add_service(order_tree)
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    (stop_server, tokio::spawn(server))
}

/// Raise the soft open-file limit to the hard one: launches open each rank's files and
/// sockets, and the listener's bounds are sized well under a thousand.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// The agent's listener: connections not yet vetted by a certificate the agent serves,
/// from one address and in all, and vetted ones (the master's, and the order tree's).
const LISTENER_LIMITS: gang_listen::VettingLimits = gang_listen::VettingLimits {
    per_address: 64,
    total: 256,
    vetted: 512,
};

/// A call the interceptors let through vets its connection.
fn vet(vetting: &gang_listen::Vetting, request: &tonic::Request<()>) -> Result<(), tonic::Status> {
    match request.remote_addr() {
        Some(peer) if !vetting.vet(peer) => Err(tonic::Status::unavailable(format!(
            "this agent holds {} vetted connections already; try again",
            vetting.limits().vetted
        ))),
        _ => Ok(()),
    }
}

/// This node's outbox, with its spool in its own directory (whatever else shares the
/// base), emptied of what an earlier agent left.
fn outbox_for(cfg: &AgentConfig) -> anyhow::Result<Arc<Outbox>> {
    let spool_dir = cfg
        .spool_dir
        .join(format!("{}-{}", cfg.coord.x, cfg.coord.y));
    Spools::prepare(&spool_dir).with_context(|| {
        format!(
            "cannot make the output spool directory {}",
            spool_dir.display()
        )
    })?;
    Ok(Arc::new(Outbox::with_config(OutboxConfig {
        spool_dir: Some(spool_dir),
        spool_cap: cfg.spool_cap,
        ..OutboxConfig::default()
    })))
}

impl Tasks {
    /// The lease, the registry session, the uplink, the clock probes and the switch
    /// reports.
    fn spawn(
        cfg: &AgentConfig,
        (client, session_tls): (RegistryClient, ClientTlsConfig),
        node: &Arc<Node>,
        switch: Arc<Switcher>,
        clock: Arc<Clock>,
        address: String,
    ) -> anyhow::Result<Tasks> {
        let lease_state = Arc::clone(&node.lease);
        let lease = tokio::spawn(lease::watch(
            Arc::clone(&lease_state),
            {
                let node = Arc::clone(node);
                move || !node.ranks.is_empty()
            },
            {
                let node = Arc::clone(node);
                move || node.stop_all()
            },
        ));
        let session = if cfg.emulate {
            Session::Task(emulated_sessions().spawn(registry_client::run_session(
                client.clone(),
                Arc::clone(node),
                address,
                Arc::clone(&lease_state),
                tokio::runtime::Handle::current(),
            )))
        } else {
            // One below the switch thread: a heartbeat never delays a switch.
            Session::Thread(
                SessionThread::start(
                    SessionParts {
                        master: cfg.master.clone(),
                        tls: session_tls,
                        node: Arc::clone(node),
                        address,
                        lease: lease_state,
                    },
                    (cfg.rt_priority - 1).max(0),
                )
                .context("cannot start the session thread")?,
            )
        };
        let uplink = tokio::spawn(registry_client::run_uplink(
            client.clone(),
            Arc::clone(node),
        ));
        let probes = Some(match cfg.clock {
            ClockMode::Probe => {
                let kick = Arc::clone(&switch);
                let client = client.clone();
                tokio::spawn(clock::run_probes(
                    move || registry_client::probe_clock(client.clone()),
                    clock,
                    cfg.clock_probe_max,
                    move || kick.kick(),
                ))
            }
            ClockMode::Host => tokio::spawn(host_clock::run_host_bound(clock)),
        });
        let reports = tokio::spawn(report::run_reports(
            move |report| registry_client::report_switches(client.clone(), report),
            switch,
        ));
        Ok(Tasks {
            session,
            uplink,
            probes,
            reports,
            lease,
        })
    }

    async fn stop(self) {
        match self.session {
            Session::Thread(t) => t.stop().await,
            Session::Task(t) => t.abort(),
        }
        self.lease.abort();
        self.uplink.abort();
        self.reports.abort();
        if let Some(p) = &self.probes {
            p.abort();
        }
    }
}

impl AgentHandle {
    /// Kill and reap every rank, give the master a moment to hear about it, stop serving.
    pub async fn shutdown(self) {
        let reaped = self.node.kill_all(Instant::now() + REAP_WAIT).await;
        if reaped && !self.node.ranks.is_empty() {
            let delivered = self
                .node
                .ranks
                .wait_empty(Instant::now() + FLUSH_WAIT)
                .await;
            if !delivered {
                warn!(
                    unacknowledged = self.node.ranks.len(),
                    "exiting with exit reports the master has not acknowledged"
                );
            }
        }
        self.node.switch.finish().await;
        if let Some(g) = &self.guard {
            // Every rank was killed and reaped above: nothing is left for it to do.
            g.finish();
        }
        self.tasks.stop().await;
        let _ = self.stop_server.send(());
        let mut server = self.server;
        if tokio::time::timeout(FLUSH_WAIT, &mut server).await.is_err() {
            server.abort();
        }
        info!("agent stopped");
    }
}

/// `grpc=HOST:PORT\n`, written to a temporary file in the same directory and renamed
/// into place, so a launcher polling for the file never reads half of it.
pub fn write_ready_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ready".into());
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "grpc={addr}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The host:port the master should dial. A wildcard bind (0.0.0.0, [::]) is not an
/// address anyone can reach, so advertise the host name instead.
pub fn advertised_address(addr: SocketAddr) -> String {
    if !addr.ip().is_unspecified() {
        return addr.to_string();
    }
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(host) if !host.trim().is_empty() => format!("{}:{}", host.trim(), addr.port()),
        _ => addr.to_string(),
    }
}

/// Start every node; on the first that cannot start, stop those started and say which.
pub async fn start_all(cfgs: Vec<AgentConfig>) -> anyhow::Result<Vec<AgentHandle>> {
    let mut agents = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        let coord = cfg.coord;
        match start(cfg).await {
            Ok(a) => agents.push(a),
            Err(e) => {
                for a in agents {
                    a.shutdown().await;
                }
                return Err(e.context(format!("emulated node {coord}")));
            }
        }
    }
    Ok(agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_file_is_complete_and_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.ready");
        write_ready_file(&path, "127.0.0.1:4567".parse().unwrap()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "grpc=127.0.0.1:4567\n"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("agent.ready")]);
    }

    #[test]
    fn wildcard_binds_advertise_a_host_name() {
        assert_eq!(
            advertised_address("127.0.0.1:5".parse().unwrap()),
            "127.0.0.1:5"
        );
        let a = advertised_address("0.0.0.0:5".parse().unwrap());
        assert!(a.ends_with(":5") && !a.starts_with("0.0.0.0"), "{a}");
    }
}
