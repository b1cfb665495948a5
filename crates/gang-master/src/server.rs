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
use crate::config::daemon::DaemonConfig;
use crate::connections::{self, StreamCountLayer};
use crate::metrics::{self, Metrics};
use crate::output::OutputHub;
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

pub async fn start(cfg: DaemonConfig) -> anyhow::Result<RunningMaster> {
    let tls = cfg.tls.read().with_context(|| {
        "the master's TLS files (make a cluster's with `gangctl certs init DIR --mesh WxH`, \
         or bring your own: deploy/README.md)"
    })?;
    let auth = Arc::new(Authenticator::open(
        cfg.master.auth.clone(),
        &cfg.token_key,
    )?);
    let metrics = Arc::new(Metrics::default());
    let limits = cfg.connections.clone();
    let nofile = connections::raise_fd_limit();
    let sizes = limits.plan(nofile, cfg.master.mesh.area());
    let agents =
        Arc::new(AgentPool::new(tls.clone(), cfg.fanout).with_max_channels(sizes.agent_channels));
    let output = Arc::new(OutputHub::new(
        cfg.state_dir(),
        cfg.master.limits.max_output_bytes,
    )?);
    // Before the servers bind: a standby (state in etcd, another master leads) waits here,
    // answering every call with where the leader is (`persistence/standby.rs`), and clients and
    // agents that try it first go on to the next master they know.
    // With the leader's admission (pools, vetting, deadlines), accounted on its own.
    let mut standby = crate::persistence::standby::StandbyServers::new(
        &cfg,
        connections::Listeners::new(&limits, sizes, Arc::new(Metrics::default()), {
            let auth = auth.clone();
            Arc::new(move |uid| auth.is_admin_uid(uid))
        }),
    );
    let opened = crate::persistence::open(&cfg, |who| {
        crate::notify::status(&format!("standing by: the leader is {who}"));
        standby.waiting(who);
    })
    .await;
    standby.stop().await;
    let opened = opened?;
    let (lost, resign): (Option<LostLeadership>, Option<Resign>) = match &opened.0 {
        crate::persistence::StateStore::Etcd(s) => {
            (Some(Box::pin(s.on_lost())), Some(Box::pin(s.resign())))
        }
        crate::persistence::StateStore::Sqlite(_) => (None, None),
    };
    let client_tcp = bind_tcp(cfg.listen, "clients").await?;
    let agent_tcp = bind_tcp(cfg.agent_listen, "agents").await?;
    if let crate::persistence::StateStore::Etcd(s) = &opened.0 {
        let me =
            crate::persistence::advertise_at(client_tcp.local_addr()?, agent_tcp.local_addr()?);
        if let Err(e) = s.advertise(me).await {
            warn!("saying where this master serves in its leader key: {e:#}");
        }
    }
    let metrics_listener = metrics::bind(cfg.metrics_listen)
        .await
        .with_context(|| format!("cannot listen on {} for metrics", cfg.metrics_listen))?;
    let socket_path = cfg.socket.clone();
    let unix = crate::unix_socket::bind_socket(&socket_path)?;
    let grpc_addr = client_tcp.local_addr()?;
    let agent_addr = agent_tcp.local_addr()?;
    let metrics_addr = metrics_listener.local_addr()?;
    let ready_file = cfg.ready_file.clone();
    let mesh = cfg.master.mesh;
    let max_msg = cfg.master.limits.max_request_bytes;
    // Boundaries settle 1 s after their deadline: agents report every 250 ms.
    let stats = Arc::new(Mutex::new(SwitchStats::new(1_000_000_000, 100_000)));
    let quantum_ns = i64::from(cfg.master.quantum_ms) * 1_000_000;
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
    let cfg_web_origins = cfg.web_origins.clone();
    let web_portal = cfg.web_portal;
    // Recovery happens here: nothing is served before the state is back.
    let (handle, state) = actor::start(cfg.master, metrics.clone(), agents.clone(), opened)?;

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
    let relay_key = agents.signer.public_key();
    let jobs = JobServiceServer::new(Jobs {
        handle: handle.clone(),
        output: output.clone(),
        agents,
        auth: auth.clone(),
        attaches: AttachSlots::new(limits.max_attaches_per_user),
        metrics: metrics.clone(),
    })
    .max_decoding_message_size(max_msg)
    // Answers are bounded too (listings come in pages): one that is not fails here,
    // saying so, rather than in a client's decoder.
    .max_encoding_message_size(max_msg);
    let admin = AdminServiceServer::new(Admin {
        handle: handle.clone(),
        auth: auth.clone(),
        stats: stats.clone(),
        quantum_ns,
    })
    .max_decoding_message_size(max_msg);
    let tokens = AuthServiceServer::new(Tokens { auth: auth.clone() });
    let registry = AgentRegistryServer::new(Registry {
        relay_key,
        handle: handle.clone(),
        placements: crate::placements::Placements::start(handle.clone()),
        output,
        stats,
        metrics: metrics.clone(),
    })
    .max_decoding_message_size(max_msg);

    let identity = Identity::from_pem(&tls.cert, &tls.key);
    let ca = Certificate::from_pem(&tls.ca);
    let (stop, stopped) = watch::channel(false);
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.changed().await;
    };
    // Every listener: keepalive pings find dead peers; the layer counts each
    // connection's open streams for its idle deadline (`connections/deadlines.rs`).
    let server = || {
        Server::builder()
            .http2_keepalive_interval(Some(limits.keepalive_interval))
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .layer(StreamCountLayer)
    };
    let admission = connections::Listeners::new(&limits, sizes, metrics.clone(), {
        let auth = auth.clone();
        Arc::new(move |uid| auth.is_admin_uid(uid))
    });
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
    let cors = web_cors(&cfg_web_origins)?;
    let remote = server()
        .layer(crate::web::portal::PortalLayer { on: web_portal })
        .layer(crate::web::guard::WebGuardLayer {
            origins: web_origin_values(&cfg_web_origins)?,
        })
        .layer(cors)
        .layer(tonic_web::GrpcWebLayer::new())
        .tls_config(
            ServerTlsConfig::new()
                .identity(identity.clone())
                .client_ca_root(ca.clone())
                .client_auth_optional(true),
        )?
        .add_service(health.clone())
        .add_service(reflection_v1.clone())
        .add_service(reflection_v1alpha.clone())
        .add_service(jobs.clone())
        .add_service(admin.clone())
        .add_service(tokens.clone())
        .serve_with_incoming_shutdown(admission.clients(client_tcp), until(stopped.clone()));
    let for_agents = server()
        .tls_config(ServerTlsConfig::new().identity(identity).client_ca_root(ca))?
        .add_service(registry)
        .serve_with_incoming_shutdown(admission.agents(agent_tcp), until(stopped));
    let servers = tokio::spawn(async move {
        tokio::try_join!(local, remote, for_agents)?;
        Ok(())
    });
    let grpc_where = format!("unix:{} and https://{grpc_addr}", socket_path.display());
    tokio::spawn(metrics::serve(metrics_listener, metrics, grpc_where));
    info!(%grpc_addr, %agent_addr, socket = %socket_path.display(), %metrics_addr, %mesh, "master serving");
    if let Some(path) = ready_file {
        write_ready(
            &path,
            &format!(
                "grpc={grpc_addr}\nagents={agent_addr}\nsocket={}\nmetrics={metrics_addr}\n",
                socket_path.display()
            ),
        )?;
    }
    Ok(RunningMaster {
        grpc_addr,
        agent_addr,
        socket: socket_path,
        metrics_addr,
        handle,
        stop,
        servers,
        state,
        lost,
        resign,
    })
}

/// CORS for gRPC-Web: the allowed origins may POST with the headers gRPC-Web and a token
/// need, and read gRPC's status from the response. No origin listed: no CORS headers, so
/// browsers let only same-origin pages call.
fn web_origin_values(origins: &[String]) -> anyhow::Result<Vec<tonic::codegen::http::HeaderValue>> {
    origins
        .iter()
        .map(|o| {
            tonic::codegen::http::HeaderValue::from_str(o)
                .with_context(|| format!("web origin {o:?}"))
        })
        .collect()
}

fn web_cors(origins: &[String]) -> anyhow::Result<tower_http::cors::CorsLayer> {
    use tonic::codegen::http::{HeaderName, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins = web_origin_values(origins)?;
    let names = |ns: &[&'static str]| {
        ns.iter()
            .map(|n| HeaderName::from_static(n))
            .collect::<Vec<_>>()
    };
    Ok(CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::POST])
        .allow_headers(names(&[
            "content-type",
            "x-grpc-web",
            "x-user-agent",
            "grpc-timeout",
            "authorization",
        ]))
        .expose_headers(names(&[
            "grpc-status",
            "grpc-message",
            "grpc-status-details-bin",
        ]))
        .max_age(std::time::Duration::from_secs(600)))
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
