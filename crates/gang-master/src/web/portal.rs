//! The reference portal (`portal/index.html`): one page that calls the API from the
//! browser with gRPC-Web and the user's token, served on the TLS port at `/portal/` when
//! `[web] portal = true`. Everything else goes on to the gRPC services.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{Method, Request, Response, StatusCode, header};

/// The page, built into the master.
pub const PAGE: &str = include_str!("../../portal/index.html");

/// What the page may do in the browser: its own inline script and style, and calls to
/// the master that served it; nothing from elsewhere, no framing by other sites.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Where a browser finds the page served on `addr`: `localhost` on this host (the
/// master's certificate names it), else the name the certificate names the master by.
pub fn url(addr: std::net::SocketAddr) -> String {
    let host = if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        "localhost"
    } else {
        gang_auth::names::MASTER_DNS
    };
    format!("https://{host}:{}/portal/", addr.port())
}

#[derive(Debug, Clone, Copy)]
pub struct PortalLayer {
    pub on: bool,
}

impl<S> tower::Layer<S> for PortalLayer {
    type Service = Portal<S>;
    fn layer(&self, inner: S) -> Portal<S> {
        Portal { inner, on: self.on }
    }
}

#[derive(Debug, Clone)]
pub struct Portal<S> {
    inner: S,
    on: bool,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> tower::Service<Request<Body>> for Portal<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let path = req.uri().path();
        if self.on && matches!(path, "/portal" | "/portal/" | "/portal/index.html") {
            let resp = if req.method() == Method::GET || req.method() == Method::HEAD {
                page()
            } else {
                plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n")
            };
            return Box::pin(std::future::ready(Ok(resp)));
        }
        Box::pin(self.inner.call(req))
    }
}

fn page() -> Response<Body> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_SECURITY_POLICY, CSP)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::new(http_body_util::Full::new(
            bytes::Bytes::from_static(PAGE.as_bytes()),
        )))
        .expect("a valid response")
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::new(http_body_util::Full::new(
            bytes::Bytes::from_static(text.as_bytes()),
        )))
        .expect("a valid response")
}
