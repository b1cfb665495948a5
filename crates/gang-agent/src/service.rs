//! The NodeAgent gRPC service: a thin adapter from messages to `Node` calls.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gang_proto::v1::node_agent_server::NodeAgent;
use gang_proto::v1::{
    LaunchRequest, LaunchResponse, ProbeRequest, ProbeResponse, SignalRequest, SignalResponse,
    StdinRequest, StdinResponse,
};
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::node::Node;

#[derive(Debug, Clone)]
pub struct AgentService {
    node: Arc<Node>,
}

impl AgentService {
    pub fn new(node: Arc<Node>) -> Self {
        AgentService { node }
    }
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (what the master's probes compare).
pub fn realtime_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

#[tonic::async_trait]
impl NodeAgent for AgentService {
    async fn launch(
        &self,
        request: Request<LaunchRequest>,
    ) -> Result<Response<LaunchResponse>, Status> {
        let req = request.into_inner();
        let (job_id, rank) = (req.job_id, req.rank);
        // Spawned right here, in this handler's task on a runtime worker thread (see
        // `launch::command` for why not spawn_blocking).
        match self.node.launch(req) {
            Ok(pid) => Ok(Response::new(LaunchResponse { pid })),
            Err(e) => {
                warn!(job_id, rank, "launch failed: {e}");
                Err(e.into())
            }
        }
    }

    async fn signal(
        &self,
        request: Request<SignalRequest>,
    ) -> Result<Response<SignalResponse>, Status> {
        let req = request.into_inner();
        let grace = Duration::from_millis(u64::from(req.grace_ms));
        let found = self.node.signal(req.job_id, grace);
        Ok(Response::new(SignalResponse { found }))
    }

    async fn stdin(
        &self,
        request: Request<StdinRequest>,
    ) -> Result<Response<StdinResponse>, Status> {
        let req = request.into_inner();
        self.node.stdin(req.job_id, req.data, req.eof).await?;
        Ok(Response::new(StdinResponse {}))
    }

    async fn probe(
        &self,
        request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        let t2_ns = realtime_ns();
        let t1_ns = request.get_ref().t1_ns;
        Ok(Response::new(ProbeResponse {
            t1_ns,
            t2_ns,
            t3_ns: realtime_ns(),
        }))
    }
}
