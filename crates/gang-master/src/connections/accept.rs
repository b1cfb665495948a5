//! The accept loops of the master's listeners: each accepted connection is admitted to its
//! pool (`admission.rs`) or closed at once, and an admitted one is served under its
//! deadlines (`deadlines.rs`). A full descriptor table (EMFILE, which the pools are sized
//! to avoid) pauses accepting briefly instead of spinning or stopping the server.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::time::Sleep;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;

use super::authority::AuthorityFix;
use tracing::{debug, warn};

use super::admission::{PeerKey, Pool, Refusal, peer_ip};
use super::deadlines::{Deadlined, Deadlines, Expired, Peer};
use crate::metrics::{ConnLabel, Metrics};

/// Raise the soft open-file limit to the hard one (the master's connections are bounded
/// by its pools, sized from this); returns the soft limit in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// At most one warning per listener this often; the lines in between are counted.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// After an accept failed for want of descriptors or memory, wait this long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Refused connections handled in one poll before yielding to other tasks.
const REFUSALS_PER_POLL: usize = 64;
/// How long a user's admin status is believed (it changes with `admins` groups).
const ADMIN_CACHE_TTL: Duration = Duration::from_secs(60);

/// What every listener's loop shares: its name, its pool and deadlines, the metrics.
pub struct Admitting {
    pub listener: &'static str,
    pub pool: Arc<Pool>,
    pub deadlines: Deadlines,
    pub metrics: Arc<Metrics>,
    /// Closes every connection admitted here when cancelled (`Listeners::close_all`).
    pub closing: Option<CancellationToken>,
    warned: Option<Instant>,
    unwarned: u64,
    backoff: Option<Pin<Box<Sleep>>>,
}

impl Admitting {
    pub fn new(
        listener: &'static str,
        pool: Arc<Pool>,
        deadlines: Deadlines,
        metrics: Arc<Metrics>,
    ) -> Self {
        Admitting {
            listener,
            pool,
            deadlines,
            metrics,
            closing: None,
            warned: None,
            unwarned: 0,
            backoff: None,
        }
    }

    fn label(&self, reason: &str) -> ConnLabel {
        ConnLabel {
            listener: self.listener.to_string(),
            reason: reason.to_string(),
        }
    }

    /// Whether to log now (and how many lines were held back since the last one).
    fn may_warn(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.warned.is_some_and(|w| now - w < WARN_EVERY) {
            self.unwarned += 1;
            return None;
        }
        self.warned = Some(now);
        Some(std::mem::take(&mut self.unwarned))
    }

    fn refused(&mut self, key: PeerKey, why: Refusal) {
        self.metrics
            .connections_refused
            .get_or_create(&self.label(why.label()))
            .inc();
        if let Some(held_back) = self.may_warn() {
            let limit = match (why, key) {
                (Refusal::PeerLimit, PeerKey::Uid(_)) => "max_per_user",
                (Refusal::PeerLimit, PeerKey::Ip(_)) if self.listener == "agents" => {
                    "max_agent_per_ip"
                }
                (Refusal::PeerLimit, PeerKey::Ip(_)) => "max_per_ip",
                (Refusal::PoolFull, _) if self.listener == "agents" => "max_agent_connections",
                (Refusal::PoolFull, _) => "max_client_connections less admin_reserve",
            };
            warn!(
                listener = self.listener,
                peer = ?key,
                open = self.pool.open(),
                refused_since_last_warning = held_back,
                "connection refused: the limit {limit} ([connections]) is reached"
            );
        }
    }

    /// An accept that failed: pause if the system is out of descriptors or memory.
    fn accept_failed(&mut self, e: std::io::Error) {
        let scarce = matches!(
            e.raw_os_error(),
            Some(
                libc_errno::EMFILE | libc_errno::ENFILE | libc_errno::ENOBUFS | libc_errno::ENOMEM
            )
        );
        if scarce {
            self.metrics
                .connections_refused
                .get_or_create(&self.label("accept_failed"))
                .inc();
            if let Some(held_back) = self.may_warn() {
                warn!(listener = self.listener, error = %e, refused_since_last_warning = held_back,
                    "cannot accept: out of descriptors or memory; pausing the listener");
            }
            self.backoff = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
        } else {
            debug!(listener = self.listener, error = %e, "accept failed");
        }
    }

    /// The callback a connection calls when a deadline closes it.
    fn on_expiry(&self) -> Arc<dyn Fn(Expired) + Send + Sync> {
        let (metrics, listener) = (self.metrics.clone(), self.listener);
        Arc::new(move |why: Expired| {
            debug!(
                listener,
                deadline = why.label(),
                "connection closed: deadline passed"
            );
            metrics
                .connections_expired
                .get_or_create(&ConnLabel {
                    listener: listener.to_string(),
                    reason: why.label().to_string(),
                })
                .inc();
        })
    }

    /// Accept until a connection is admitted, the listener has nothing, or enough were
    /// refused that other tasks should run.
    fn poll_admit<S, IO>(
        &mut self,
        cx: &mut Context<'_>,
        mut accept: impl FnMut(&mut Context<'_>) -> Poll<std::io::Result<S>>,
        mut admit: impl FnMut(&mut Self, S) -> Option<Deadlined<IO>>,
    ) -> Poll<Option<std::io::Result<Deadlined<IO>>>> {
        for _ in 0..REFUSALS_PER_POLL {
            if let Some(b) = self.backoff.as_mut() {
                if b.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.backoff = None;
            }
            match accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => self.accept_failed(e),
                Poll::Ready(Ok(s)) => {
                    if let Some(conn) = admit(self, s) {
                        return Poll::Ready(Some(Ok(conn)));
                    }
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// errno values, without a dependency for four constants.
mod libc_errno {
    pub const ENOMEM: i32 = nix::errno::Errno::ENOMEM as i32;
    pub const ENFILE: i32 = nix::errno::Errno::ENFILE as i32;
    pub const EMFILE: i32 = nix::errno::Errno::EMFILE as i32;
    pub const ENOBUFS: i32 = nix::errno::Errno::ENOBUFS as i32;
}

/// The Unix socket's connections, admitted by the uid of their peer credentials.
pub struct UnixIncoming {
    listener: UnixListener,
    admitting: Admitting,
    is_admin: Box<dyn Fn(u32) -> bool + Send>,
    admins: HashMap<u32, (bool, Instant)>,
}

impl UnixIncoming {
    pub fn new(
        listener: UnixListener,
        admitting: Admitting,
        is_admin: Box<dyn Fn(u32) -> bool + Send>,
    ) -> Self {
        UnixIncoming {
            listener,
            admitting,
            is_admin,
            admins: HashMap::new(),
        }
    }
}

/// Whether `uid` is root or an admin, looked up (a user database query) at most once a
/// minute per user, and only for a connection that would be refused otherwise.
fn privileged(
    admins: &mut HashMap<u32, (bool, Instant)>,
    is_admin: &dyn Fn(u32) -> bool,
    uid: u32,
) -> bool {
    if uid == 0 {
        return true;
    }
    let now = Instant::now();
    if let Some(&(yes, at)) = admins.get(&uid)
        && now - at < ADMIN_CACHE_TTL
    {
        return yes;
    }
    if admins.len() > 4096 {
        admins.clear();
    }
    let yes = is_admin(uid);
    admins.insert(uid, (yes, now));
    yes
}

impl Stream for UnixIncoming {
    type Item = std::io::Result<Deadlined<AuthorityFix<UnixStream>>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let (listener, admins, is_admin) = (&this.listener, &mut this.admins, &this.is_admin);
        this.admitting.poll_admit(
            cx,
            |cx| listener.poll_accept(cx).map_ok(|(s, _)| s),
            |a, stream| {
                let info = stream.connect_info();
                // Without credentials nobody could be told apart: refuse (Linux always
                // gives them).
                let uid = info.peer_cred.map_or(u32::MAX, |c| c.uid());
                let key = PeerKey::Uid(uid);
                let privileged =
                    a.pool.would_refuse(key) && privileged(admins, is_admin.as_ref(), uid);
                match a.pool.admit(key, privileged) {
                    Ok(p) => Some(Deadlined::new(
                        // grpcio and grpc-java name the socket's path as :authority.
                        AuthorityFix::new(stream),
                        Peer::Unix(info),
                        a.deadlines,
                        p,
                        a.on_expiry(),
                        a.closing.clone(),
                    )),
                    Err(why) => {
                        a.refused(key, why);
                        None
                    }
                }
            },
        )
    }
}

/// A TCP listener's connections, admitted by the peer's address (`peer_ip`).
pub struct TcpIncoming {
    listener: TcpListener,
    admitting: Admitting,
}

impl TcpIncoming {
    pub fn new(listener: TcpListener, admitting: Admitting) -> Self {
        TcpIncoming {
            listener,
            admitting,
        }
    }
}

impl Stream for TcpIncoming {
    type Item = std::io::Result<Deadlined<TcpStream>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let listener = &this.listener;
        this.admitting.poll_admit(
            cx,
            |cx| listener.poll_accept(cx).map_ok(|(s, _)| s),
            |a, stream| {
                let info = stream.connect_info();
                let ip = info
                    .remote_addr
                    .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |r| r.ip());
                let key = PeerKey::Ip(peer_ip(ip));
                match a.pool.admit(key, false) {
                    Ok(p) => {
                        // Small replies must not wait for delayed ACKs (40 ms on Linux).
                        let _ = stream.set_nodelay(true);
                        Some(Deadlined::new(
                            stream,
                            Peer::Tcp(info),
                            a.deadlines,
                            p,
                            a.on_expiry(),
                            a.closing.clone(),
                        ))
                    }
                    Err(why) => {
                        a.refused(key, why);
                        None
                    }
                }
            },
        )
    }
}

/// The agent port's connections: counted in its pool, and under its vetting (`gang_listen`):
/// until a node certificate's first call vets one, it may be closed for a newcomer, so a
/// flood of connections from anyone who can reach the port (no certificate needed to
/// connect) never keeps agents out.
pub struct AgentIncoming {
    listener: TcpListener,
    admitting: Admitting,
    vetting: Arc<gang_listen::Vetting>,
}

impl AgentIncoming {
    pub fn new(
        listener: TcpListener,
        admitting: Admitting,
        vetting: Arc<gang_listen::Vetting>,
    ) -> Self {
        AgentIncoming {
            listener,
            admitting,
            vetting,
        }
    }
}

impl Stream for AgentIncoming {
    type Item = std::io::Result<Deadlined<gang_listen::Vetted<TcpStream>>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let (listener, vetting) = (&this.listener, &this.vetting);
        this.admitting.poll_admit(
            cx,
            |cx| listener.poll_accept(cx),
            |a, (stream, remote)| {
                let info = stream.connect_info();
                let key = PeerKey::Ip(peer_ip(remote.ip()));
                match a.pool.admit(key, false) {
                    Ok(p) => {
                        let _ = stream.set_nodelay(true);
                        let ticket = vetting.enter(remote);
                        Some(
                            Deadlined::new(
                                gang_listen::Vetted::new(stream, ticket),
                                Peer::Tcp(info),
                                a.deadlines,
                                p,
                                a.on_expiry(),
                                a.closing.clone(),
                            )
                            .with_vetting(vetting.clone()),
                        )
                    }
                    Err(why) => {
                        a.refused(key, why);
                        None
                    }
                }
            },
        )
    }
}
