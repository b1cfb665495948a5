//! What a browser may send the TLS port: gRPC and gRPC-Web, from the master's own origin
//! or one `[web] allow_origins` names. A page on another site cannot call the API as a
//! user whose browser holds a gang certificate: a `text/plain` POST (which needs no CORS
//! preflight, and whose gRPC frame the services would otherwise run) is refused with 415,
//! and any request naming an origin not allowed with 403, before a service sees it. CORS
//! only tells browsers what they may read; this decides what runs.
//!
//! Preflights (OPTIONS) go on to the CORS layer, which answers them; requests without an
//! `Origin` (the CLI, grpcurl, health probes) are not browsers' and pass.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{HeaderValue, Method, Request, Response, StatusCode, header};

#[derive(Debug, Clone)]
pub struct WebGuardLayer {
    /// The origins pages may call from, besides the master's own.
    pub origins: Vec<HeaderValue>,
}

impl<S> tower::Layer<S> for WebGuardLayer {
    type Service = WebGuard<S>;
    fn layer(&self, inner: S) -> WebGuard<S> {
        WebGuard {
            inner,
            origins: self.origins.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WebGuard<S> {
    inner: S,
    origins: Vec<HeaderValue>,
}

/// Whether a content type is gRPC's or gRPC-Web's (`application/grpc`, `+proto`, `;...`,
/// `application/grpc-web`, `-text`).
pub fn grpc_content_type(ct: &str) -> bool {
    let ct = ct.trim().to_ascii_lowercase();
    let Some(rest) = ct.strip_prefix("application/grpc") else {
        return false;
    };
    rest.is_empty() || rest.starts_with('+') || rest.starts_with(';') || rest.starts_with("-web")
}

/// Why a request is refused, if it is.
fn refusal(req: &Request<Body>, origins: &[HeaderValue]) -> Option<(StatusCode, &'static str)> {
    if req.method() == Method::OPTIONS {
        return None;
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !grpc_content_type(ct) {
        return Some((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "only gRPC and gRPC-Web are served here\n",
        ));
    }
    let origin = req.headers().get(header::ORIGIN)?;
    if origins.contains(origin) || same_origin(req, origin) {
        return None;
    }
    Some((
        StatusCode::FORBIDDEN,
        "this origin may not call the master ([web] allow_origins)\n",
    ))
}

/// The origin of the master's own pages: `https://` and the authority the request names.
fn same_origin(req: &Request<Body>, origin: &HeaderValue) -> bool {
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        });
    authority.is_some_and(|a| origin.to_str().ok() == Some(&format!("https://{a}")))
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> tower::Service<Request<Body>> for WebGuard<S>
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
        if let Some((status, text)) = refusal(&req, &self.origins) {
            let resp = Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(Body::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(text.as_bytes()),
                )))
                .expect("a valid response");
            return Box::pin(async move {
                super::drain(req.into_body()).await;
                Ok(resp)
            });
        }
        Box::pin(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, ct: Option<&str>, origin: Option<&str>) -> Request<Body> {
        let mut b = Request::builder()
            .method(method)
            .uri("https://master.example:7470/gang.v1.JobService/Submit");
        if let Some(ct) = ct {
            b = b.header(header::CONTENT_TYPE, ct);
        }
        if let Some(o) = origin {
            b = b.header(header::ORIGIN, o);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn only_grpc_from_allowed_origins_runs() {
        let allowed = vec![HeaderValue::from_static("https://portal.example")];
        let r = |m, ct, o| refusal(&req(m, ct, o), &allowed).map(|(s, _)| s.as_u16());
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
        ] {
            assert_eq!(r(Method::POST, Some(ct), None), None, "{ct}");
        }
        assert_eq!(r(Method::POST, Some("text/plain"), None), Some(415));
        assert_eq!(r(Method::POST, None, None), Some(415));
        assert_eq!(r(Method::POST, Some("application/grpcx"), None), Some(415));
        assert_eq!(
            r(
                Method::POST,
                Some("text/plain"),
                Some("https://evil.example")
            ),
            Some(415)
        );
        assert_eq!(
            r(
                Method::POST,
                Some("application/grpc-web+proto"),
                Some("https://evil.example")
            ),
            Some(403)
        );
        let ok = Some("https://portal.example");
        assert_eq!(r(Method::POST, Some("application/grpc-web"), ok), None);
        let own = Some("https://master.example:7470");
        assert_eq!(r(Method::POST, Some("application/grpc-web"), own), None);
        // Preflights go on to CORS.
        assert_eq!(r(Method::OPTIONS, None, Some("https://evil.example")), None);
    }
}
