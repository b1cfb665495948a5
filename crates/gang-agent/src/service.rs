//! The NodeAgent gRPC service: a thin adapter from messages to `Node` calls.

use std::sync::Arc;
use std::time::Duration;

use gang_proto::v1::node_agent_server::NodeAgent;
use gang_proto::v1::{
    LaunchRequest, LaunchResponse, NodeTable, SetTableResponse, SignalRequest, SignalResponse,
    StdinRequest, StdinResponse,
};
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::error::AgentError;
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

    async fn set_table(
        &self,
        request: Request<NodeTable>,
    ) -> Result<Response<SetTableResponse>, Status> {
        match self.node.switch.set_table(request.into_inner()) {
            Ok(version) => Ok(Response::new(SetTableResponse { version })),
            Err(what) => {
                warn!("slice table refused: {what}");
                Err(AgentError::InvalidArgument {
                    node: self.node.coord,
                    what,
                }
                .into())
            }
        }
    }
}
