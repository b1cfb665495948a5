//! What a standby master answers (state in etcd, another master leads): on its socket,
//! its client port and its agent port, every call (health checks included) is refused
//! UNAVAILABLE, saying where the leader is, in words and in the `gang-leader` metadata
//! (`gang_proto::client::LEADER_METADATA`). Clients and agents given several masters take
//! that as "not here" and try the next; a load balancer's health check sees it unhealthy.
//!
//! Served only while waiting (from the first time the election says another leads), and
//! stopped, its ports released, before the leader's own servers bind them.

use anyhow::Context as _;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use gang_proto::client::LEADER_METADATA;
use gang_proto::v1::admin_service_server::AdminServiceServer;
use gang_proto::v1::agent_registry_server::AgentRegistryServer;
use gang_proto::v1::auth_service_server::AuthServiceServer;
use gang_proto::v1::job_service_server::JobServiceServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tracing::{info, warn};

use crate::connections::{ConnInfo, Listeners, Peer, StreamCountLayer};
use crate::daemon_config::DaemonConfig;
use crate::service::{admin::Admin, jobs::Jobs, registry::Registry, tokens::Tokens};

/// Every call of service `N` refused, naming the leader.
struct Refuse<N> {
    leader: Arc<RwLock<String>>,
    _service: PhantomData<fn() -> N>,
}

impl<N> Clone for Refuse<N> {
    fn clone(&self) -> Self {
        Refuse {
            leader: self.leader.clone(),
            _service: PhantomData,
        }
    }
}

impl<N: NamedService> NamedService for Refuse<N> {
    const NAME: &'static str = N::NAME;
}

impl<N> Service<http::Request<Body>> for Refuse<N> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<http::Response<Body>, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // Where the leader is (its host, pid and ports) only to a caller known by the
        // socket's credentials or a certificate; others learn only to move on.
        let who = if known_caller(&req) {
            self.leader.read().map(|w| w.clone()).unwrap_or_default()
        } else {
            UNTOLD.to_string()
        };
        let mut st = tonic::Status::unavailable(format!(
            "this master stands by; the leader is {who} (try the next master)"
        ));
        // A hostname that is not ASCII cannot go in a header; the message still says it.
        if let Ok(v) = who.parse() {
            st.metadata_mut().insert(LEADER_METADATA, v);
        }
        // The request's body read first, for a moment at most.
        Box::pin(async move {
            let _ = tokio::time::timeout(DRAIN_WAIT, crate::web::drain(req.into_body())).await;
            Ok(st.into_http())
        })
    }
}

/// How long a refused request's body is read before the answer.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What an unknown caller is told of the leader.
const UNTOLD: &str = "another master (ask with a certificate or on the master's socket)";

/// Whether the caller is known: on the Unix socket (its peer credentials), or with a
/// certificate the TLS handshake verified.
fn known_caller(req: &http::Request<Body>) -> bool {
    use tonic::transport::server::TlsConnectInfo;
    let ext = req.extensions();
    // A TLS connection carries its plain `ConnInfo` too: the certificate decides.
    if let Some(tls) = ext.get::<TlsConnectInfo<ConnInfo>>() {
        return tls.peer_certs().is_some_and(|c| !c.is_empty());
    }
    ext.get::<ConnInfo>()
        .is_some_and(|info| matches!(info.peer, Peer::Unix(_)))
}

type Health = tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>;

/// The standby's servers, started by the first [`StandbyServers::waiting`].
pub struct StandbyServers {
    cfg: DaemonConfig,
    leader: Arc<RwLock<String>>,
    /// The leader's admission, its counts the standby's own.
    listeners: Option<Listeners>,
    running: Option<(watch::Sender<bool>, JoinHandle<()>)>,
    /// Ends every connection the standby's listeners admitted.
    closing: CancellationToken,
}

impl StandbyServers {
    pub fn new(cfg: &DaemonConfig, listeners: Listeners) -> StandbyServers {
        let closing = CancellationToken::new();
        StandbyServers {
            cfg: cfg.clone(),
            leader: Arc::default(),
            listeners: Some(listeners.closed_by(closing.clone())),
            running: None,
            closing,
        }
    }

    /// Another master leads (`who`, as its leader key says): answer so.
    pub fn waiting(&mut self, who: &str) {
        if let Ok(mut w) = self.leader.write() {
            *w = who.to_string();
        }
        if self.running.is_none()
            && let Some(listeners) = self.listeners.take()
        {
            let (tx, rx) = watch::channel(false);
            let task = tokio::spawn(serve(self.cfg.clone(), self.leader.clone(), listeners, rx));
            self.running = Some((tx, task));
        }
    }

    /// This master leads now: stop answering, and release the ports. Every connection the
    /// standby held is closed (each runs as a task of its own, which aborting the servers
    /// would not end; its clients and agents reconnect to the leader's, whose admission
    /// counts them afresh): none lingers, uncounted.
    pub async fn stop(self) {
        self.closing.cancel();
        let Some((tx, task)) = self.running else {
            return;
        };
        let _ = tx.send(true);
        task.abort();
        let _ = task.await;
        let _ = std::fs::remove_file(&self.cfg.socket);
    }
}

async fn serve(
    cfg: DaemonConfig,
    leader: Arc<RwLock<String>>,
    listeners: Listeners,
    stop: watch::Receiver<bool>,
) {
    if let Err(e) = try_serve(&cfg, leader, &listeners, stop).await {
        warn!("standing by, without answering on the master's ports: {e:#}");
    }
}

/// The standby's three listeners, bound again every second while a port is busy (a port
/// held a moment by another process is no reason to stand by mute for good); `None` once
/// told to stop. The socket is bound last, so a client that finds it is answered: a socket
/// file left behind by a failed start would refuse every connection.
async fn bind_ports(
    cfg: &DaemonConfig,
    mut stop: watch::Receiver<bool>,
) -> Option<(
    tokio::net::UnixListener,
    tokio::net::TcpListener,
    tokio::net::TcpListener,
)> {
    loop {
        let bound = async {
            let clients = tokio::net::TcpListener::bind(cfg.listen)
                .await
                .with_context(|| format!("clients' port {}", cfg.listen))?;
            let agents = tokio::net::TcpListener::bind(cfg.agent_listen)
                .await
                .with_context(|| format!("agents' port {}", cfg.agent_listen))?;
            let unix = crate::unix_socket::bind_socket(&cfg.socket)?;
            anyhow::Ok((unix, clients, agents))
        };
        match bound.await {
            Ok(all) => return Some(all),
            Err(e) => warn!("standing by, not yet answering (trying again in 1 s): {e:#}"),
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

async fn try_serve(
    cfg: &DaemonConfig,
    leader: Arc<RwLock<String>>,
    listeners: &Listeners,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let tls = cfg.tls.read()?;
    let identity = Identity::from_pem(&tls.cert, &tls.key);
    let ca = Certificate::from_pem(&tls.ca);
    let tls_config = ServerTlsConfig::new()
        .identity(identity.clone())
        .client_ca_root(ca.clone())
        .client_auth_optional(true);
    // Agents present their node's certificate, as to the leader.
    let agent_tls = ServerTlsConfig::new().identity(identity).client_ca_root(ca);
    let limits = &cfg.connections;
    let server = || {
        Server::builder()
            .http2_keepalive_interval(Some(limits.keepalive_interval))
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .layer(StreamCountLayer)
    };
    let Some((unix, clients, agents)) = bind_ports(cfg, stop.clone()).await else {
        return Ok(());
    };
    info!(
        socket = %cfg.socket.display(),
        clients = %cfg.listen,
        agents = %cfg.agent_listen,
        "standing by: calls are answered with where the leader is"
    );
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let l = &leader;
    let routes = Routes::new(refuse::<Health>(l))
        .add_service(refuse::<JobServiceServer<Jobs>>(l))
        .add_service(refuse::<AdminServiceServer<Admin>>(l))
        .add_service(refuse::<AuthServiceServer<Tokens>>(l));
    let local = server()
        .add_routes(routes.clone())
        .serve_with_incoming_shutdown(listeners.unix(unix), until(stop.clone()));
    let remote = server()
        .tls_config(tls_config)?
        .add_routes(routes)
        .serve_with_incoming_shutdown(listeners.clients(clients), until(stop.clone()));
    let for_agents = server()
        .tls_config(agent_tls)?
        .add_service(refuse::<AgentRegistryServer<Registry>>(l))
        .serve_with_incoming_shutdown(listeners.agents(agents), until(stop));
    let r = tokio::try_join!(local, remote, for_agents);
    let _ = std::fs::remove_file(&cfg.socket);
    r?;
    Ok(())
}

fn refuse<N>(leader: &Arc<RwLock<String>>) -> Refuse<N> {
    Refuse {
        leader: leader.clone(),
        _service: PhantomData,
    }
}
