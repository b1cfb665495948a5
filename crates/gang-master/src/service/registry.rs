//! `AgentRegistry`: what node agents call.

use std::sync::Arc;

use gang_proto::v1::{self, agent_registry_server::AgentRegistry};
use tonic::{Request, Response, Status};

use crate::output::OutputHub;
use crate::state::{Cmd, Handle};

pub struct Registry {
    pub handle: Handle,
    pub output: Arc<OutputHub>,
}

#[tonic::async_trait]
impl AgentRegistry for Registry {
    async fn register(
        &self,
        req: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        Ok(Response::new(
            self.handle
                .call(|tx| Cmd::Register(req.into_inner(), tx))
                .await?,
        ))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        Ok(Response::new(
            self.handle
                .call(|tx| Cmd::Heartbeat(req.into_inner(), tx))
                .await?,
        ))
    }

    async fn report_exit(
        &self,
        req: Request<v1::RankExit>,
    ) -> Result<Response<v1::RankExitAck>, Status> {
        self.handle
            .call(|tx| Cmd::RankExit(req.into_inner(), tx))
            .await?;
        Ok(Response::new(v1::RankExitAck {}))
    }

    async fn push_output(
        &self,
        req: Request<v1::OutputBatch>,
    ) -> Result<Response<v1::OutputAck>, Status> {
        let b = req.into_inner();
        // Straight to the log: output never queues behind scheduling work.
        self.output
            .append(b.job_id, &b.chunks)
            .map_err(|e| Status::internal(format!("output log of job {}: {e}", b.job_id)))?;
        Ok(Response::new(v1::OutputAck {}))
    }
}
