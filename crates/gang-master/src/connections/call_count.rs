//! Calls on the agent port, counted by method (`gang_agent_calls_total{method}`): what
//! the master's work at fleet sizes is made of (calls per launched rank, per node and
//! second), read by the emulated-fleet bench. Only the registry's own methods get a label
//! of their own, so a peer naming made-up methods cannot grow the metric: the rest count
//! as `other`.

use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::http;

use crate::metrics::{MethodLabel, Metrics};

const SERVICE: &str = "/gang.v1.AgentRegistry/";

/// The methods of `service AgentRegistry` (proto/gang/v1/gang.proto; a test holds the
/// list to it).
pub const AGENT_METHODS: &[&str] = &[
    "Register",
    "Heartbeat",
    "ReportExit",
    "ReportExits",
    "PushOutput",
    "ReportSwitches",
    "ClockProbe",
    "Fence",
    "FenceDone",
    "HeartbeatBatch",
];

/// The label a request path counts under.
pub fn method_of(path: &str) -> &'static str {
    path.strip_prefix(SERVICE)
        .and_then(|m| AGENT_METHODS.iter().find(|&&k| k == m))
        .copied()
        .unwrap_or("other")
}

#[derive(Clone)]
pub struct CallCountLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CallCountLayer {
    type Service = CallCount<S>;

    fn layer(&self, inner: S) -> CallCount<S> {
        CallCount {
            inner,
            metrics: Arc::clone(&self.0),
        }
    }
}

#[derive(Clone)]
pub struct CallCount<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<B>> for CallCount<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> S::Future {
        let method = method_of(req.uri().path()).to_owned();
        self.metrics
            .agent_calls
            .get_or_create(&MethodLabel { method })
            .inc();
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_method_has_its_label_and_nothing_else_does() {
        let proto = include_str!("../../../../proto/gang/v1/gang.proto");
        let body = proto
            .split("service AgentRegistry {")
            .nth(1)
            .and_then(|s| s.split("\n}").next())
            .expect("service AgentRegistry in gang.proto");
        let mut in_proto: Vec<&str> = body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .map(str::trim)
            .collect();
        let mut listed = AGENT_METHODS.to_vec();
        in_proto.sort_unstable();
        listed.sort_unstable();
        assert_eq!(listed, in_proto, "AGENT_METHODS against gang.proto");
        assert_eq!(method_of("/gang.v1.AgentRegistry/Heartbeat"), "Heartbeat");
        assert_eq!(method_of("/gang.v1.AgentRegistry/Made-Up"), "other");
        assert_eq!(method_of("/gang.v1.Jobs/Heartbeat"), "other");
    }
}
