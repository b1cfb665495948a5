//! `AdminService`: nodes, drain/resume, the slice matrix.

use gang_proto::v1::{self, admin_service_server::AdminService};
use tonic::{Request, Response, Status};

use crate::state::{Cmd, Handle};

pub struct Admin {
    pub handle: Handle,
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn list_nodes(
        &self,
        _: Request<v1::ListNodesRequest>,
    ) -> Result<Response<v1::ListNodesResponse>, Status> {
        Ok(Response::new(self.handle.call(Cmd::ListNodes).await?))
    }

    async fn drain(
        &self,
        req: Request<v1::NodeRequest>,
    ) -> Result<Response<v1::NodeResponse>, Status> {
        let r = req.into_inner();
        let node = self
            .handle
            .call(|tx| Cmd::SetDrained(r.x, r.y, true, tx))
            .await?;
        Ok(Response::new(v1::NodeResponse { node: Some(node) }))
    }

    async fn resume(
        &self,
        req: Request<v1::NodeRequest>,
    ) -> Result<Response<v1::NodeResponse>, Status> {
        let r = req.into_inner();
        let node = self
            .handle
            .call(|tx| Cmd::SetDrained(r.x, r.y, false, tx))
            .await?;
        Ok(Response::new(v1::NodeResponse { node: Some(node) }))
    }

    async fn get_matrix(
        &self,
        _: Request<v1::GetMatrixRequest>,
    ) -> Result<Response<v1::Matrix>, Status> {
        Ok(Response::new(self.handle.call(Cmd::Matrix).await?))
    }

    async fn get_stats(
        &self,
        _: Request<v1::GetStatsRequest>,
    ) -> Result<Response<v1::Stats>, Status> {
        Ok(Response::new(self.handle.call(Cmd::Stats).await?))
    }
}
