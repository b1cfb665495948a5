//! `AdminService`: nodes, drain/resume (admins), the slice matrix, switching figures.

use std::sync::{Arc, Mutex};

use gang_proto::v1::{self, admin_service_server::AdminService};
use tonic::{Request, Response, Status};

use crate::actor::{Cmd, Handle, wall_ns};
use crate::auth::Authenticator;
use crate::service::convert;
use crate::switch_stats::SwitchStats;

pub struct Admin {
    pub handle: Handle,
    pub auth: Arc<Authenticator>,
    /// Switch reports, fed by the registry service.
    pub stats: Arc<Mutex<SwitchStats>>,
    /// The configured quantum (reported even before a table exists).
    pub quantum_ns: i64,
}

impl Admin {
    async fn set_drained(
        &self,
        req: Request<v1::NodeRequest>,
        drained: bool,
    ) -> Result<v1::NodeResponse, Status> {
        let caller = self.auth.caller(&req)?;
        let r = req.into_inner();
        let node = self
            .handle
            .call(|tx| Cmd::SetDrained((r.x, r.y), drained, caller, tx))
            .await?;
        Ok(v1::NodeResponse {
            node: Some(convert::node_info(&node)),
        })
    }
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn list_nodes(
        &self,
        req: Request<v1::ListNodesRequest>,
    ) -> Result<Response<v1::ListNodesResponse>, Status> {
        self.auth.caller(&req)?;
        let nodes = self.handle.call(Cmd::ListNodes).await?;
        Ok(Response::new(convert::nodes(&nodes)))
    }

    async fn drain(
        &self,
        req: Request<v1::NodeRequest>,
    ) -> Result<Response<v1::NodeResponse>, Status> {
        Ok(Response::new(self.set_drained(req, true).await?))
    }

    async fn resume(
        &self,
        req: Request<v1::NodeRequest>,
    ) -> Result<Response<v1::NodeResponse>, Status> {
        Ok(Response::new(self.set_drained(req, false).await?))
    }

    async fn get_matrix(
        &self,
        req: Request<v1::GetMatrixRequest>,
    ) -> Result<Response<v1::Matrix>, Status> {
        self.auth.caller(&req)?;
        let m = self.handle.call(Cmd::Matrix).await?;
        Ok(Response::new(convert::matrix(&m)))
    }

    async fn get_stats(
        &self,
        req: Request<v1::GetStatsRequest>,
    ) -> Result<Response<v1::Stats>, Status> {
        self.auth.caller(&req)?;
        let table = self.handle.call(Cmd::TableInForce).await?;
        let mut st = {
            // Figures only: a panic elsewhere while holding the lock leaves them usable.
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            s.close(wall_ns());
            s.snapshot()
        };
        st.table_version = table.as_ref().map_or(0, |t| t.version);
        st.table_seq = table.as_ref().map_or(0, |t| t.seq);
        st.quantum_ns = self.quantum_ns;
        Ok(Response::new(st))
    }
}
