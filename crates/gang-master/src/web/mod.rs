//! Browsers on the client port: the reference portal page (`portal.rs`) and the guard on
//! what a browser may send (`guard.rs`), and CORS for the origins `[web] allow_origins`
//! names (here).

pub mod guard;
pub mod portal;

use anyhow::Context;

/// The most of a refused request's body read before the answer.
pub const DRAIN_MAX: usize = 64 << 10;

/// Read a refused request's body (at most `DRAIN_MAX` of it: more is cut off), so that
/// the client hears the answer rather than a stream reset under its upload. The web guard
/// and a standby's refusals both answer this way.
pub async fn drain(body: tonic::body::Body) {
    use http_body_util::BodyExt;
    let _ = http_body_util::Limited::new(body, DRAIN_MAX)
        .collect()
        .await;
}

/// CORS for gRPC-Web: the allowed origins may POST with the headers gRPC-Web and a token
/// need, and read gRPC's status from the response. No origin listed: no CORS headers, so
/// browsers let only same-origin pages call.
pub fn origin_values(origins: &[String]) -> anyhow::Result<Vec<tonic::codegen::http::HeaderValue>> {
    origins
        .iter()
        .map(|o| {
            tonic::codegen::http::HeaderValue::from_str(o)
                .with_context(|| format!("web origin {o:?}"))
        })
        .collect()
}

pub fn cors(origins: &[String]) -> anyhow::Result<tower_http::cors::CorsLayer> {
    use tonic::codegen::http::{HeaderName, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins = origin_values(origins)?;
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
