//! The metrics port: `/metrics` served (the rest answered with where gRPC is), and its
//! admission. It serves a scraper or two, and anyone on the host can connect to it:
//! unbounded, a local user's idle connections would take the descriptors
//! the master needs for agents and clients. So it holds at most `MAX_OPEN` connections
//! (a newcomer past them is closed at once), each for at most `LIFETIME` from its accept:
//! a scrape takes milliseconds, and a scraper that keeps its connection alive just opens
//! another.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::TcpConnectInfo;

use super::admission::{PeerKey, PerPeer, Pool};
use super::deadlines::{Deadlined, Deadlines, Peer};

/// Connections the metrics port holds at once.
pub const MAX_OPEN: usize = 64;
/// How long one connection may stay open.
pub const LIFETIME: Duration = Duration::from_secs(10);

/// The metrics port's listener, for `axum::serve`.
pub struct MetricsListener {
    inner: TcpListener,
    pool: Arc<Pool>,
}

impl MetricsListener {
    pub fn new(inner: TcpListener) -> MetricsListener {
        // One peer may take them all: local users share 127.0.0.1, and the port serves
        // nothing else of the master's.
        let per_peer = PerPeer {
            uid: MAX_OPEN,
            ip: MAX_OPEN,
        };
        MetricsListener {
            inner,
            pool: Pool::new(MAX_OPEN, 0, per_peer, Gauge::default()),
        }
    }
}

impl axum::serve::Listener for MetricsListener {
    type Io = Deadlined<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            // Full: the newcomer is closed (dropped) here.
            let Ok(permit) = self.pool.admit(PeerKey::Ip(addr.ip()), false) else {
                continue;
            };
            let info = TcpConnectInfo {
                local_addr: stream.local_addr().ok(),
                remote_addr: Some(addr),
            };
            let io = Deadlined::new(
                stream,
                Peer::Tcp(info),
                Deadlines {
                    handshake: LIFETIME,
                    idle: LIFETIME,
                },
                permit,
                Arc::new(|_| {}),
                None,
            );
            return (io, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// Serve `/metrics` on `listener` until the process ends. Anything else gets an answer
/// naming this port and where gRPC is served (`grpc_where`): a gRPC client pointed here by
/// mistake gets UNIMPLEMENTED with that text, not a bare HTTP 404 it would report as
/// "unexpected HTTP status".
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<crate::metrics::Metrics>,
    grpc_where: String,
) {
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let grpc_where = grpc_where.clone();
        async move { not_metrics(&req, &grpc_where) }
    });
    let app = app.route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    m.render(),
                )
            }
        }),
    );
    let listener = MetricsListener::new(listener);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "metrics server stopped");
    }
}

fn not_metrics(
    req: &axum::extract::Request,
    grpc_where: &str,
) -> axum::response::Response<axum::body::Body> {
    use axum::http::{StatusCode, header};
    let what = format!(
        "this is the gang master's Prometheus metrics port (GET /metrics only); \
         gRPC is served on {grpc_where}"
    );
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let mut resp = axum::response::Response::builder();
    if grpc {
        // A trailers-only gRPC answer: status 12 (UNIMPLEMENTED); the message is plain
        // ASCII without '%', so it needs no percent-encoding.
        resp = resp
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/grpc")
            .header("grpc-status", "12")
            .header("grpc-message", what.as_str());
        return resp.body(axum::body::Body::empty()).expect("valid headers");
    }
    resp.status(StatusCode::NOT_FOUND)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(axum::body::Body::from(format!("{what}\n")))
        .expect("valid headers")
}

pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idle connections stop at `MAX_OPEN`: the next is closed at once, and a scrape is
    /// answered again once one of them has ended.
    #[tokio::test]
    async fn idle_connections_stop_at_the_cap_and_a_scrape_gets_through_after() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::default());
        tokio::spawn(serve(l, metrics, "elsewhere".into()));
        let mut idle = vec![];
        for _ in 0..MAX_OPEN {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let scrape = || async {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            out.starts_with("HTTP/1.1 200").then_some(out)
        };
        // The server takes them in order: once it has taken all the idle ones, a scrape
        // is closed unanswered.
        let refused = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if scrape().await.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(refused.is_ok(), "a scrape past the cap was answered");
        idle.pop();
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(out) = scrape().await {
                    break out;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("a scrape is answered once a place is free");
        assert!(answered.contains("gang_"), "{answered}");
    }
}
