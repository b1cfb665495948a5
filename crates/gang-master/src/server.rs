//! Starting the master: the state task, and three gRPC listeners, each with the identity
//! rule of its callers:
//!
//! | listener | who | TLS | identity |
//! |---|---|---|---|
//! | Unix socket (`socket`, mode 0666) | local clients | none | the socket's peer credentials |
//! | `listen` (TCP) | remote clients | server cert; client cert optional | a user certificate, or a token |
//! | `agent_listen` (TCP) | agents | mutual, node certificates required | the node in the certificate |
//!
//! Clients get JobService, AdminService, AuthService, health and reflection; agents get
//! AgentRegistry only. Metrics are plain HTTP on their own port. The TLS port also answers
//! gRPC-Web (browsers, with a token), with CORS for the origins in `[web] allow_origins`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use gang_proto::v1::admin_service_server::AdminServiceServer;
use gang_proto::v1::agent_registry_server::AgentRegistryServer;
use gang_proto::v1::auth_service_server::AuthServiceServer;
use gang_proto::v1::job_service_server::JobServiceServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tracing::{info, warn};

use crate::actor;
use crate::agents::AgentPool;
use crate::auth::Authenticator;
use crate::connections::{self, StreamCountLayer};
use crate::daemon_config::DaemonConfig;
use crate::metrics::Metrics;
use crate::output::OutputHub;
use crate::persistence::StateStore;
use crate::service::attach_slots::AttachSlots;
use crate::service::{admin::Admin, jobs::Jobs, registry::Registry, tokens::Tokens};
use crate::switch_stats::SwitchStats;

/// The services a client may call, as health and reflection name them.
const CLIENT_SERVICES: [&str; 6] = [
    <JobServiceServer<Jobs> as NamedService>::NAME,
    <AdminServiceServer<Admin> as NamedService>::NAME,
    <AuthServiceServer<Tokens> as NamedService>::NAME,
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

pub struct RunningMaster {
    /// Remote clients (TLS).
    pub grpc_addr: SocketAddr,
    /// Agents (mutual TLS).
    pub agent_addr: SocketAddr,
    /// Local clients.
    pub socket: PathBuf,
    pub metrics_addr: SocketAddr,
    /// The state task, for callers that must know it still answers (the systemd watchdog).
    pub handle: actor::Handle,
    stop: watch::Sender<bool>,
    servers: JoinHandle<anyhow::Result<()>>,
    state: JoinHandle<()>,
    /// With the state in etcd: ends, saying why, when this master no longer leads.
    lost: Option<LostLeadership>,
    /// With the state in etcd: gives leadership up at a clean stop.
    resign: Option<Resign>,
}

type LostLeadership = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;
type Resign = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl RunningMaster {
    /// Serve until `shutdown` resolves, then stop serving and wait (at most `grace`) for
    /// in-flight calls. An error if a server or the state task ends first: without its
    /// state task the master can answer nothing, so it must exit and be restarted.
    pub async fn serve_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
        grace: std::time::Duration,
    ) -> anyhow::Result<()> {
        let lost = async {
            match self.lost.take() {
                Some(l) => l.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown => {}
            why = lost => {
                // Another master leads (or will once this one's lease ends): this one's
                // writes are refused from now on, so it stops serving. Restarted (by
                // systemd), it stands by.
                let _ = self.stop.send(true);
                tracing::error!("this master no longer leads ({why}): stops serving");
                anyhow::bail!("this master no longer leads ({why}): stepping down");
            }
            r = &mut self.state => {
                anyhow::bail!("the state task ended: {}", match r {
                    Ok(()) => "it stopped".to_string(),
                    Err(e) => e.to_string(),
                });
            }
            r = &mut self.servers => {
                r??;
                anyhow::bail!("the gRPC servers stopped");
            }
        }
        info!("shutting down");
        let _ = self.stop.send(true);
        // Attached clients hold streams open; they reconnect to the next master, so do not
        // wait on them for long. Everything accepted is already committed.
        match tokio::time::timeout(grace, &mut self.servers).await {
            Ok(r) => r??,
            Err(_) => info!("streams still open after {grace:?}; exiting anyway"),
        }
        let _ = std::fs::remove_file(&self.socket);
        // A standby takes over now, not a lease's TTL from now.
        if let Some(resign) = self.resign.take() {
            resign.await;
            info!("leadership given up");
        }
        Ok(())
    }
}

async fn bind_tcp(addr: SocketAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for {what}"))
}

/// What the master's services share, made before anything is served.
struct Shared {
    tls: gang_auth::pki::TlsPem,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
    agents: Arc<AgentPool>,
    output: Arc<OutputHub>,
    limits: connections::ConnLimits,
    sizes: connections::PoolSizes,
    nofile: u64,
}

/// The listeners, bound.
struct Bound {
    clients: tokio::net::TcpListener,
    agents: tokio::net::TcpListener,
    metrics: tokio::net::TcpListener,
    unix: tokio::net::UnixListener,
}

/// The services clients and agents call.
struct Services {
    jobs: JobServiceServer<Jobs>,
    admin: AdminServiceServer<Admin>,
    tokens: AuthServiceServer<Tokens>,
    registry: AgentRegistryServer<Registry>,
}

/// Start the master: its shared parts, the state (standing by while another master
/// leads), the listeners, the state task (recovery), then the servers.
pub async fn start(cfg: DaemonConfig) -> anyhow::Result<RunningMaster> {
    let shared = Shared::new(&cfg)?;
    let opened = open_state(&cfg, &shared).await?;
    let (lost, resign) = leadership(&opened.0);
    let bound = Bound::bind(&cfg, &opened.0).await?;
    let grpc_addr = bound.clients.local_addr()?;
    let agent_addr = bound.agents.local_addr()?;
    let metrics_addr = bound.metrics.local_addr()?;
    shared.log_pools();
    // Recovery happens here: nothing is served before the state is back.
    let (handle, state) = actor::start(
        cfg.master.clone(),
        shared.metrics.clone(),
        shared.agents.clone(),
        opened,
    )?;
    let services = Services::new(&cfg, &shared, &handle);
    let (stop, servers) = serve_grpc(
        &cfg,
        &shared,
        services,
        bound.unix,
        bound.clients,
        bound.agents,
    )
    .await?;
    let socket = cfg.socket.clone();
    let grpc_where = format!("unix:{} and https://{grpc_addr}", socket.display());
    tokio::spawn(connections::metrics_port::serve(
        bound.metrics,
        shared.metrics.clone(),
        grpc_where,
    ));
    let mesh = cfg.master.mesh;
    info!(%grpc_addr, %agent_addr, socket = %socket.display(), %metrics_addr, %mesh, "master serving");
    let portal = cfg.web_portal.then(|| crate::web::portal::url(grpc_addr));
    if let Some(url) = &portal {
        info!(%url, "portal served (sign in with a token of `gangctl token`)");
    }
    if let Some(path) = &cfg.ready_file {
        let mut ready = format!(
            "grpc={grpc_addr}\nagents={agent_addr}\nsocket={}\nmetrics={metrics_addr}\n",
            socket.display()
        );
        if let Some(url) = &portal {
            ready.push_str(&format!("portal={url}\n"));
        }
        write_ready(path, &ready)?;
    }
    Ok(RunningMaster {
        grpc_addr,
        agent_addr,
        socket,
        metrics_addr,
        handle,
        stop,
        servers,
        state,
        lost,
        resign,
    })
}

impl Shared {
    fn new(cfg: &DaemonConfig) -> anyhow::Result<Shared> {
        let tls = cfg.tls.read().with_context(|| {
            "the master's TLS files (make a cluster's with `gangctl certs init DIR --mesh WxH`, \
             or bring your own: deploy/README.md)"
        })?;
        let auth = Arc::new(Authenticator::open(
            cfg.master.auth.clone(),
            &cfg.token_key,
        )?);
        let limits = cfg.connections.clone();
        let nofile = connections::raise_fd_limit();
        let sizes = limits.plan(nofile, cfg.master.mesh.area());
        let agents = Arc::new(
            AgentPool::new(tls.clone(), cfg.fanout).with_max_channels(sizes.agent_channels),
        );
        tokio::spawn(crate::agents::sweep_idle_channels(Arc::downgrade(&agents)));
        let output = Arc::new(OutputHub::new(
            cfg.state_dir(),
            cfg.master.limits.max_output_bytes,
        )?);
        Ok(Shared {
            tls,
            auth,
            metrics: Arc::new(Metrics::default()),
            agents,
            output,
            limits,
            sizes,
            nofile,
        })
    }

    /// The listeners' admission, with admins told by the authenticator.
    fn admission(&self, metrics: Arc<Metrics>) -> connections::Listeners {
        let auth = self.auth.clone();
        connections::Listeners::new(
            &self.limits,
            self.sizes,
            metrics,
            Arc::new(move |uid| auth.is_admin_uid(uid)),
        )
    }

    fn log_pools(&self) {
        let (nofile, sizes) = (self.nofile, self.sizes);
        if !sizes.fits {
            warn!(
                nofile,
                clients = sizes.clients,
                agents = sizes.agents,
                "the open-file limit is too low for these connection pools and the master's own \
                 files: raise LimitNOFILE (the unit sets 65536) or lower [connections]"
            );
        }
        info!(
            nofile,
            clients = sizes.clients,
            agents = sizes.agents,
            agent_channels = sizes.agent_channels,
            "connection pools"
        );
    }
}

/// Open the state. Before the servers bind: a standby (state in etcd, another master
/// leads) waits here, answering every call with where the leader is
/// (`standby.rs`), and clients and agents that try it first go on to the next
/// master they know. With the leader's admission (pools, vetting, deadlines), accounted
/// on its own.
async fn open_state(
    cfg: &DaemonConfig,
    shared: &Shared,
) -> anyhow::Result<(StateStore, crate::persistence::Initial)> {
    let mut standby =
        crate::standby::StandbyServers::new(cfg, shared.admission(Arc::new(Metrics::default())));
    let opened = crate::persistence::open(cfg, |who| {
        crate::notify::status(&format!("standing by: the leader is {who}"));
        standby.waiting(who);
    })
    .await;
    standby.stop().await;
    opened
}

/// With the state in etcd: when leadership is lost, and how to give it up.
fn leadership(store: &StateStore) -> (Option<LostLeadership>, Option<Resign>) {
    match store {
        StateStore::Etcd(s) => (Some(Box::pin(s.on_lost())), Some(Box::pin(s.resign()))),
        StateStore::Sqlite(_) => (None, None),
    }
}

impl Bound {
    /// Bind every listener; with etcd, say in the leader key where this master serves.
    async fn bind(cfg: &DaemonConfig, store: &StateStore) -> anyhow::Result<Bound> {
        let clients = bind_tcp(cfg.listen, "clients").await?;
        let agents = bind_tcp(cfg.agent_listen, "agents").await?;
        if let StateStore::Etcd(s) = store {
            let me = crate::persistence::advertise_at(clients.local_addr()?, agents.local_addr()?);
            if let Err(e) = s.advertise(me).await {
                warn!("saying where this master serves in its leader key: {e:#}");
            }
        }
        let metrics = connections::metrics_port::bind(cfg.metrics_listen)
            .await
            .with_context(|| format!("cannot listen on {} for metrics", cfg.metrics_listen))?;
        let unix = crate::unix_socket::bind_socket(&cfg.socket)?;
        Ok(Bound {
            clients,
            agents,
            metrics,
            unix,
        })
    }
}

impl Services {
    fn new(cfg: &DaemonConfig, shared: &Shared, handle: &actor::Handle) -> Services {
        let max_msg = cfg.master.limits.max_request_bytes;
        // Boundaries settle 1 s after their deadline: agents report every 250 ms.
        let stats = Arc::new(Mutex::new(SwitchStats::new(1_000_000_000, 100_000)));
        let jobs = JobServiceServer::new(Jobs {
            handle: handle.clone(),
            output: shared.output.clone(),
            agents: shared.agents.clone(),
            auth: shared.auth.clone(),
            attaches: AttachSlots::new(shared.limits.max_attaches_per_user),
            metrics: shared.metrics.clone(),
        })
        .max_decoding_message_size(max_msg)
        // Answers are bounded too (listings come in pages): one that is not fails here,
        // saying so, rather than in a client's decoder.
        .max_encoding_message_size(max_msg);
        let admin = AdminServiceServer::new(Admin {
            handle: handle.clone(),
            auth: shared.auth.clone(),
            stats: stats.clone(),
            quantum_ns: i64::from(cfg.master.quantum_ms) * 1_000_000,
        })
        .max_decoding_message_size(max_msg);
        let tokens = AuthServiceServer::new(Tokens {
            auth: shared.auth.clone(),
        });
        let registry = AgentRegistryServer::new(Registry {
            relay_key: shared.agents.signer.public_key(),
            handle: handle.clone(),
            placements: crate::placements::Placements::start(handle.clone()),
            output: shared.output.clone(),
            stats,
            metrics: shared.metrics.clone(),
        })
        .max_decoding_message_size(max_msg);
        Services {
            jobs,
            admin,
            tokens,
            registry,
        }
    }
}

/// Serve the three gRPC listeners until told to stop: the socket and the TLS port the
/// client services (with health and reflection), the agent port the registry.
async fn serve_grpc(
    cfg: &DaemonConfig,
    shared: &Shared,
    services: Services,
    unix: tokio::net::UnixListener,
    client_tcp: tokio::net::TcpListener,
    agent_tcp: tokio::net::TcpListener,
) -> anyhow::Result<(watch::Sender<bool>, JoinHandle<anyhow::Result<()>>)> {
    // Health answers SERVING for "" (tonic-health's default) and for every client service
    // by name: load balancers and `grpc_health_probe -service` ask for the one they use.
    let (health_reporter, health) = tonic_health::server::health_reporter();
    for name in CLIENT_SERVICES {
        health_reporter
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
    }
    // Both reflection versions: grpcurl before 1.8.8 and Python's grpcio-reflection client
    // speak only v1alpha. Only client services are listed (agents have their own port).
    let reflection = || {
        CLIENT_SERVICES.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(gang_proto::v1::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |b, name| b.with_service_name(*name),
        )
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let Services {
        jobs,
        admin,
        tokens,
        registry,
    } = services;
    let identity = Identity::from_pem(&shared.tls.cert, &shared.tls.key);
    let ca = Certificate::from_pem(&shared.tls.ca);
    let (stop, stopped) = watch::channel(false);
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.changed().await;
    };
    // Every listener: keepalive pings find dead peers; the layer counts each
    // connection's open streams for its idle deadline (`connections/deadlines.rs`).
    let limits = &shared.limits;
    let server = || {
        Server::builder()
            .http2_keepalive_interval(Some(limits.keepalive_interval))
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .layer(StreamCountLayer)
    };
    let admission = shared.admission(shared.metrics.clone());
    let local = server()
        .add_service(health.clone())
        .add_service(reflection_v1.clone())
        .add_service(reflection_v1alpha.clone())
        .add_service(jobs.clone())
        .add_service(admin.clone())
        .add_service(tokens.clone())
        .serve_with_incoming_shutdown(admission.unix(unix), until(stopped.clone()));
    // Browsers: gRPC-Web on the same port (a page calls the API with a user's token; TLS
    // negotiates HTTP/2, which browsers speak), and CORS for the origins the config allows.
    let remote = server()
        .layer(crate::web::portal::PortalLayer { on: cfg.web_portal })
        .layer(crate::web::guard::WebGuardLayer {
            origins: crate::web::origin_values(&cfg.web_origins)?,
        })
        .layer(crate::web::cors(&cfg.web_origins)?)
        .layer(tonic_web::GrpcWebLayer::new())
        .tls_config(
            ServerTlsConfig::new()
                .identity(identity.clone())
                .client_ca_root(ca.clone())
                .client_auth_optional(true),
        )?
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(jobs)
        .add_service(admin)
        .add_service(tokens)
        .serve_with_incoming_shutdown(admission.clients(client_tcp), until(stopped.clone()));
    let for_agents = server()
        .layer(crate::connections::call_count::CallCountLayer(Arc::clone(
            &shared.metrics,
        )))
        .tls_config(ServerTlsConfig::new().identity(identity).client_ca_root(ca))?
        .add_service(registry)
        .serve_with_incoming_shutdown(admission.agents(agent_tcp), until(stopped));
    let servers = tokio::spawn(async move {
        tokio::try_join!(local, remote, for_agents)?;
        Ok(())
    });
    Ok((stop, servers))
}

/// Write atomically, so a reader never sees half a file.
fn write_ready(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_master_fails_when_its_state_task_dies() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DaemonConfig::for_test(gang_core::Shape::new(1, 1), dir.path().join("s.db"));
        let opened = crate::persistence::open(&cfg, |_| {}).await.unwrap();
        let (handle, _) = actor::start(cfg.master, Arc::default(), Arc::default(), opened).unwrap();
        let state = tokio::spawn(async { panic!("a broken invariant") });
        let servers = tokio::spawn(std::future::pending());
        let master = RunningMaster {
            grpc_addr: "127.0.0.1:1".parse().unwrap(),
            agent_addr: "127.0.0.1:2".parse().unwrap(),
            socket: PathBuf::from("/nonexistent/master.sock"),
            metrics_addr: "127.0.0.1:3".parse().unwrap(),
            handle,
            stop: watch::channel(false).0,
            servers,
            state,
            lost: None,
            resign: None,
        };
        let e = master
            .serve_until(std::future::pending(), std::time::Duration::from_millis(10))
            .await
            .expect_err("no state task, no master");
        assert!(e.to_string().contains("the state task ended"), "{e}");
        assert!(e.to_string().contains("a broken invariant"), "{e}");
    }
}
