//! The handshake and idle deadlines of a connection. hyper and tonic close a connection
//! when its peer is gone (HTTP/2 keepalive), not when a live peer just holds it; so each
//! accepted connection is wrapped in `Deadlined`, which fails its I/O once the connection
//! has had no open stream for too long: `handshake` from the accept to the first request
//! (TLS, the HTTP/2 preface and a request must all come by then), `idle` after its last
//! stream ended. Streams are counted by `StreamCountLayer`, a tower layer on the server
//! that finds the connection in the request's `ConnInfo` and holds a guard until the
//! response body is dropped (for a streaming call, until the stream ends).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::codegen::http;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};

use super::admission::Permit;

/// How long a connection may go without an open stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// From the accept to the first request.
    pub handshake: Duration,
    /// From the end of the last stream to the next request.
    pub idle: Duration,
}

/// What a connection's requests share: its streams open now and when it last had one.
#[derive(Debug)]
pub struct ConnState {
    open: AtomicUsize,
    /// Whether a request ever came (the handshake deadline no longer applies).
    served: AtomicBool,
    /// The accept, or the end of the last stream.
    quiet_since: Mutex<Instant>,
}

impl ConnState {
    fn new() -> Arc<Self> {
        Arc::new(ConnState {
            open: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            quiet_since: Mutex::new(Instant::now()),
        })
    }

    fn stream_started(self: &Arc<Self>) -> StreamGuard {
        self.served.store(true, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::AcqRel);
        StreamGuard(self.clone())
    }

    /// When the connection must be closed (`None`: a stream is open), and which deadline
    /// that is.
    fn deadline(&self, d: Deadlines) -> Option<(Instant, Expired)> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = *self.quiet_since.lock().expect("conn state lock");
        Some(if self.served.load(Ordering::Relaxed) {
            (since + d.idle, Expired::Idle)
        } else {
            (since + d.handshake, Expired::Handshake)
        })
    }
}

/// One open stream of a connection.
struct StreamGuard(Arc<ConnState>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        // Quiet from now on if this was the last one; set before the count drops so the
        // deadline never reads an old instant with no stream open.
        *self.0.quiet_since.lock().expect("conn state lock") = Instant::now();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which deadline closed a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    Handshake,
    Idle,
    /// Its listeners were closed (`Listeners::close_all`: a standby that leads now).
    Closed,
}

impl Expired {
    pub fn label(self) -> &'static str {
        match self {
            Expired::Handshake => "handshake",
            Expired::Idle => "idle",
            Expired::Closed => "closed",
        }
    }
}

/// Who the connection is, as tonic would say it, and its shared state. Requests find it
/// in their extensions (under TLS, inside `TlsConnectInfo`).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub peer: Peer,
    state: Arc<ConnState>,
    /// The agent port's vetting: a node certificate's first call vets the connection.
    pub vetting: Option<Arc<gang_listen::Vetting>>,
}

#[derive(Clone, Debug)]
pub enum Peer {
    Unix(UdsConnectInfo),
    Tcp(TcpConnectInfo),
}

impl ConnInfo {
    /// A local connection's info as the socket's listener makes it (for callers outside
    /// a listener: tests that call a service directly).
    pub fn unix(uds: UdsConnectInfo) -> ConnInfo {
        ConnInfo {
            peer: Peer::Unix(uds),
            state: ConnState::new(),
            vetting: None,
        }
    }

    /// The connection info of a request, on any of the master's listeners.
    pub fn of<B>(req: &http::Request<B>) -> Option<&ConnInfo> {
        let ext = req.extensions();
        ext.get::<ConnInfo>()
            .or_else(|| ext.get::<TlsConnectInfo<ConnInfo>>().map(|t| t.get_ref()))
    }
}

/// An accepted connection under its deadlines, holding its place in its pool.
pub struct Deadlined<IO> {
    io: IO,
    info: ConnInfo,
    deadlines: Deadlines,
    timer: Pin<Box<Sleep>>,
    expired: Option<Expired>,
    on_expiry: Arc<dyn Fn(Expired) + Send + Sync>,
    /// Resolves when the listeners it came from close all their connections (a standby's:
    /// a leader's never do, and its connections poll nothing more).
    closing: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    _permit: Permit,
}

impl<IO> Deadlined<IO> {
    pub fn new(
        io: IO,
        peer: Peer,
        deadlines: Deadlines,
        permit: Permit,
        on_expiry: Arc<dyn Fn(Expired) + Send + Sync>,
        closing: Option<CancellationToken>,
    ) -> Self {
        Deadlined {
            io,
            info: ConnInfo {
                peer,
                state: ConnState::new(),
                vetting: None,
            },
            timer: Box::pin(tokio::time::sleep(deadlines.handshake)),
            deadlines,
            expired: None,
            on_expiry,
            closing: closing.map(|c| Box::pin(c.cancelled_owned())),
            _permit: permit,
        }
    }

    /// Under the agent port's vetting (`gang_listen`).
    pub fn with_vetting(mut self, vetting: Arc<gang_listen::Vetting>) -> Self {
        self.info.vetting = Some(vetting);
        self
    }

    /// An error once a deadline has passed with no stream open. Called from every poll of
    /// the I/O, so the timer's waker is always the connection task's.
    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if let Some(e) = self.expired {
            return Err(expired_error(e));
        }
        if let Some(c) = self.closing.as_mut()
            && c.as_mut().poll(cx).is_ready()
        {
            self.expired = Some(Expired::Closed);
            (self.on_expiry)(Expired::Closed);
            return Err(expired_error(Expired::Closed));
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            match self.info.state.deadline(self.deadlines) {
                // Busy: look again one idle period on (cheap; nothing wakes us earlier).
                None => self.timer.as_mut().reset(now + self.deadlines.idle),
                Some((at, why)) if at <= now => {
                    self.expired = Some(why);
                    (self.on_expiry)(why);
                    return Err(expired_error(why));
                }
                Some((at, _)) => self.timer.as_mut().reset(at),
            }
        }
        Ok(())
    }
}

fn expired_error(e: Expired) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        match e {
            Expired::Handshake => "no request before the handshake deadline",
            Expired::Idle => "idle: no open stream for the idle timeout",
            Expired::Closed => "closed: the master stopped standing by",
        },
    )
}

impl<IO: AsyncRead + Unpin> AsyncRead for Deadlined<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Deadlined<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO> Connected for Deadlined<IO> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Counts each request as an open stream of its connection until its response body is
/// dropped. Requests without a `ConnInfo` (none on the master's listeners) pass uncounted.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamCountLayer;

impl<S> tower::Layer<S> for StreamCountLayer {
    type Service = StreamCount<S>;

    fn layer(&self, inner: S) -> StreamCount<S> {
        StreamCount { inner }
    }
}

#[derive(Clone, Debug)]
pub struct StreamCount<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqB, ResB> tower::Service<http::Request<ReqB>> for StreamCount<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Counted<ResB>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let guard = ConnInfo::of(&req).map(|c| c.state.stream_started());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|body| Counted {
                body,
                _guard: guard,
            }))
        })
    }
}

/// A response body that keeps its stream counted while it lives.
pub struct Counted<B> {
    body: B,
    _guard: Option<StreamGuard>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::admission::{PeerKey, PerPeer, Pool};
    use tokio::io::AsyncReadExt;

    /// A standby's connection that holds still (idle, its deadlines far off) ends when its
    /// listeners are closed, its place in the pool given back: it does not linger, uncounted
    /// by the leader, until a deadline.
    #[tokio::test]
    async fn a_closed_listeners_idle_connections_end_at_once() {
        let pool = Pool::new(8, 0, PerPeer { uid: 8, ip: 8 }, Default::default());
        let closing = CancellationToken::new();
        let (mine, _peer) = tokio::io::duplex(64);
        let long = Duration::from_secs(3600);
        let mut conn = Deadlined::new(
            mine,
            Peer::Unix(UdsConnectInfo {
                peer_addr: None,
                peer_cred: None,
            }),
            Deadlines {
                handshake: long,
                idle: long,
            },
            pool.admit(PeerKey::Uid(1000), false).unwrap(),
            Arc::new(|_| {}),
            Some(closing.clone()),
        );
        let reading = tokio::spawn(async move {
            let mut b = [0u8; 8];
            let r = conn.read(&mut b).await;
            drop(conn);
            r
        });
        tokio::task::yield_now().await;
        assert_eq!(pool.open(), 1);
        closing.cancel();
        let r = tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("the idle read is woken")
            .unwrap();
        let e = r.expect_err("its I/O fails");
        assert!(e.to_string().contains("stopped standing by"), "{e}");
        assert_eq!(pool.open(), 0, "its place is given back");
    }
}
