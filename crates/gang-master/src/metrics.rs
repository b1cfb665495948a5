//! Prometheus metrics, served as text on `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::job::State;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// A listener ("socket", "clients", "agents") and why a connection was refused or closed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnLabel {
    pub listener: String,
    pub reason: String,
}

/// What a relayed order carried: "launch", "signal", "tables".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabel {
    pub work: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

pub struct Metrics {
    pub registry: Registry,
    /// Connections open now, per listener (`connections/`).
    pub connections_open: Family<ListenerLabel, Gauge>,
    /// Connections closed at accept: a limit reached (`peer_limit`, `pool_full`) or no
    /// descriptor to accept with (`accept_failed`).
    pub connections_refused: Family<ConnLabel, Counter>,
    /// Connections closed by a deadline (`handshake`, `idle`).
    pub connections_expired: Family<ConnLabel, Counter>,
    /// Attach streams refused by `max_attaches_per_user`.
    pub attaches_refused: Counter,
    pub jobs_submitted: Counter,
    /// Jobs found deadlocked (every rank blocked in a receive, nothing in flight).
    pub jobs_deadlocked: Counter,
    /// Switch-outs of messaging-library ranks that had flushed for the boundary.
    pub msg_switch_outs_flushed: Counter,
    /// Those that had not (stopped anyway; their messages stay in socket buffers).
    pub msg_switch_outs_unflushed: Counter,
    pub jobs_finished: Family<StateLabel, Counter>,
    pub jobs_queued: Gauge,
    pub jobs_running: Gauge,
    pub slices: Gauge,
    pub nodes_up: Gauge,
    /// From placement to every rank running.
    pub launch_seconds: Histogram,
    /// How long each batch of the state task took (reactor, commit, carrying out).
    pub batch_seconds: Histogram,
    /// The longest batch since the master started, in microseconds.
    pub batch_max_us: Gauge,
    /// Per slot boundary: spread of the agents' last-signal times.
    pub switch_skew_seconds: Histogram,
    /// Per agent and switch: last signal minus the deadline.
    pub switch_latency_seconds: Histogram,
    /// Per agent and switch: last signal minus first signal.
    pub switch_cost_seconds: Histogram,
    pub switches_dropped: Counter,
    pub table_version: Gauge,
    /// Orders sent down the relay tree, by what they carried.
    pub relayed: Family<WorkLabel, Counter>,
    /// Nodes a relayed order did not reach (routed around, or their head answered
    /// nothing for them).
    pub relay_unreached: Counter,
    /// Fences gathered among their jobs' agents that completed (the master hears one
    /// message of each).
    pub fences_done: Counter,
    /// Bytes of fence messages through the master, by path: "master" (ranks' puts in,
    /// spaces out) or "agents" (the completion records).
    pub fence_bytes: Family<PathLabel, Counter>,
}

/// How fences travel: "master" or "agents".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: String,
}

impl Metrics {
    pub fn fence_bytes(&self, path: &str, n: u64) {
        self.fence_bytes
            .get_or_create(&PathLabel {
                path: path.to_owned(),
            })
            .inc_by(n);
    }

    pub fn relayed(&self, work: &str) {
        self.relayed
            .get_or_create(&WorkLabel {
                work: work.to_owned(),
            })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("gang");
        let jobs_submitted = Counter::default();
        let jobs_deadlocked = Counter::default();
        let msg_switch_outs_flushed = Counter::default();
        let msg_switch_outs_unflushed = Counter::default();
        registry.register(
            "msg_switch_outs_flushed",
            "Switch-outs of messaging-library ranks that had quiesced (flushed) for the boundary",
            msg_switch_outs_flushed.clone(),
        );
        registry.register(
            "msg_switch_outs_unflushed",
            "Switch-outs of messaging-library ranks that had not quiesced in time (stopped anyway)",
            msg_switch_outs_unflushed.clone(),
        );
        let jobs_finished = Family::<StateLabel, Counter>::default();
        let jobs_queued = Gauge::default();
        let jobs_running = Gauge::default();
        let slices = Gauge::default();
        let nodes_up = Gauge::default();
        let launch_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        // 10 us .. about 20 s.
        let batch_seconds = Histogram::new(exponential_buckets(1e-5, 2.0, 22));
        let batch_max_us = Gauge::default();
        registry.register(
            "master_batch_seconds",
            "Time each batch of the master's state task took: commands, commit and what follows",
            batch_seconds.clone(),
        );
        registry.register(
            "master_batch_max_microseconds",
            "The longest batch of the master's state task since it started",
            batch_max_us.clone(),
        );
        // 1 us .. about 1 s.
        let switch = || Histogram::new(exponential_buckets(1e-6, 2.0, 21));
        let (switch_skew_seconds, switch_latency_seconds, switch_cost_seconds) =
            (switch(), switch(), switch());
        let switches_dropped = Counter::default();
        let table_version = Gauge::default();
        registry.register(
            "switch_skew_seconds",
            "Co-scheduling skew per slot boundary: spread of the agents' last-signal times, clock offsets corrected",
            switch_skew_seconds.clone(),
        );
        registry.register(
            "switch_latency_seconds",
            "Per agent and switch: last signal sent minus the slot boundary",
            switch_latency_seconds.clone(),
        );
        registry.register(
            "switch_cost_seconds",
            "Per agent and switch: last signal minus first signal",
            switch_cost_seconds.clone(),
        );
        registry.register(
            "switches_dropped",
            "Switch records agents dropped (report buffer full)",
            switches_dropped.clone(),
        );
        registry.register(
            "table_version",
            "Newest slice table version published",
            table_version.clone(),
        );
        registry.register("jobs_submitted", "Jobs accepted", jobs_submitted.clone());
        registry.register(
            "jobs_deadlocked",
            "Jobs found deadlocked: every rank blocked in a receive with nothing in flight, at two consecutive checks",
            jobs_deadlocked.clone(),
        );
        registry.register(
            "jobs_finished",
            "Jobs ended, by final state",
            jobs_finished.clone(),
        );
        registry.register("jobs_queued", "Jobs waiting for nodes", jobs_queued.clone());
        registry.register(
            "jobs_running",
            "Jobs placed on the mesh",
            jobs_running.clone(),
        );
        registry.register("slices", "Slices in the matrix", slices.clone());
        registry.register(
            "nodes_up",
            "Nodes whose agent is registered",
            nodes_up.clone(),
        );
        registry.register(
            "launch_seconds",
            "Time from placing a job to all its ranks running",
            launch_seconds.clone(),
        );
        let connections_open = Family::<ListenerLabel, Gauge>::default();
        let connections_refused = Family::<ConnLabel, Counter>::default();
        let connections_expired = Family::<ConnLabel, Counter>::default();
        let attaches_refused = Counter::default();
        registry.register(
            "connections_open",
            "Connections open, per listener",
            connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept, per listener and reason (peer_limit, pool_full, accept_failed)",
            connections_refused.clone(),
        );
        registry.register(
            "connections_expired",
            "Connections closed by a deadline, per listener and deadline (handshake, idle)",
            connections_expired.clone(),
        );
        registry.register(
            "attaches_refused",
            "Attach streams refused: the user held max_attaches_per_user already",
            attaches_refused.clone(),
        );
        let relayed = Family::<WorkLabel, Counter>::default();
        let relay_unreached = Counter::default();
        registry.register(
            "relayed_orders",
            "Orders sent down the relay tree of agents, by work (launch, signal, tables)",
            relayed.clone(),
        );
        registry.register(
            "relay_unreached",
            "Nodes a relayed order did not reach (their agent routed around)",
            relay_unreached.clone(),
        );
        let fences_done = Counter::default();
        let fence_bytes = Family::<PathLabel, Counter>::default();
        registry.register(
            "fences_done",
            "Fences gathered among their jobs' agents that completed",
            fences_done.clone(),
        );
        registry.register(
            "fence_bytes",
            "Bytes of fence messages through the master, by path (master: ranks' puts and the spaces answered; agents: completion records)",
            fence_bytes.clone(),
        );
        Metrics {
            batch_seconds,
            batch_max_us,
            fences_done,
            fence_bytes,
            relayed,
            relay_unreached,
            registry,
            connections_open,
            connections_refused,
            connections_expired,
            attaches_refused,
            jobs_submitted,
            jobs_deadlocked,
            msg_switch_outs_flushed,
            msg_switch_outs_unflushed,
            jobs_finished,
            jobs_queued,
            jobs_running,
            slices,
            nodes_up,
            launch_seconds,
            switch_skew_seconds,
            switch_latency_seconds,
            switch_cost_seconds,
            switches_dropped,
            table_version,
        }
    }
}

impl Metrics {
    pub fn finished(&self, state: State) {
        let state = format!("{state:?}").to_lowercase();
        self.jobs_finished
            .get_or_create(&StateLabel { state })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

/// Serve `/metrics` on `listener` until the process ends. Anything else gets an answer
/// naming this port and where gRPC is served (`grpc_where`): a gRPC client pointed here by
/// mistake gets UNIMPLEMENTED with that text, not a bare HTTP 404 it would report as
/// "unexpected HTTP status".
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, grpc_where: String) {
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
    let listener = crate::connections::metrics_port::MetricsListener::new(listener);
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

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
