//! The NodeAgent gRPC service: a thin adapter from messages to `Node` calls. A Launch
//! request is converted here, once, into the agent's own `RankRequest`: no `gang_proto`
//! type goes further with it.

use std::sync::Arc;
use std::time::Duration;

use gang_core::{GangMode, Submesh};
use gang_proto::v1::node_agent_server::NodeAgent;
use gang_proto::v1::{
    self as proto, LaunchRequest, LaunchResponse, NodeTable, SetTableResponse, SignalRequest,
    SignalResponse, StdinRequest, StdinResponse,
};
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::error::AgentError;
use crate::node::Node;
use crate::ranks::RankKey;
use crate::request::{FenceSpec, Mpi, RankRequest, Submitter};

/// The request in the agent's terms.
pub(crate) fn rank_request(req: LaunchRequest) -> RankRequest {
    RankRequest {
        key: RankKey {
            job_id: req.job_id,
            rank: req.rank,
        },
        size: req.size,
        argv: req.argv,
        cwd: req.cwd,
        env: req.env,
        submitter: Submitter {
            uid: req.uid,
            gid: req.gid,
            groups: req.groups,
            user: req.user,
        },
        stdin: req.stdin,
        mode: launch_mode(req.gang),
        part: req.part.map(|p| Submesh::new(p.x, p.y, p.w, p.h)),
        // UNSPECIFIED (the default) and values unknown to this agent: resident.
        msg_context: proto::MsgContext::try_from(req.msg_context)
            .ok()
            .and_then(proto::MsgContext::resolved)
            .unwrap_or_default(),
        mpi: mpi(req.mpi),
        mpi_check: req.mpi_check,
        output: req.output,
        error: req.error,
        namespace: req.namespace,
        fence: (req.fence_width > 0).then_some(FenceSpec {
            width: req.fence_width,
            parent: req.fence_parent,
        }),
        allocation: req.allocation,
        script: (!req.script.is_empty()).then_some((req.script, req.script_at as usize)),
        pty: pty_for(req.pty, req.rank),
    }
}

/// Whether this rank runs on a pseudo-terminal; values unknown to this agent: pipes.
fn pty_for(pty: i32, rank: u32) -> bool {
    match proto::Pty::try_from(pty) {
        Ok(proto::Pty::Rank0) => rank == 0,
        Ok(proto::Pty::All) => true,
        Ok(proto::Pty::None) | Err(_) => false,
    }
}

/// The rank's mode: the only place the agent learns it (slice tables carry none).
/// UNSPECIFIED (an older master) and values unknown to this agent (a newer master) are
/// STOP, the strict mode: a job is never left running out of its slots by accident.
fn launch_mode(gang: i32) -> GangMode {
    proto::GangMode::try_from(gang)
        .ok()
        .and_then(proto::GangMode::resolved)
        .unwrap_or(GangMode::Stop)
}

/// The master resolves `mpi`; UNSPECIFIED (an older master) and values unknown to this
/// agent get the simple protocol, an older master's default.
fn mpi(mpi: i32) -> Mpi {
    match proto::Mpi::try_from(mpi) {
        Ok(proto::Mpi::Auto) => Mpi::Auto,
        Ok(proto::Mpi::Pmi2) => Mpi::Pmi2,
        Ok(proto::Mpi::Pmix) => Mpi::Pmix,
        Ok(proto::Mpi::None) => Mpi::None,
        Ok(proto::Mpi::Pmi1 | proto::Mpi::Unspecified) | Err(_) => Mpi::Pmi1,
    }
}

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
        // The master calls: that is an answer for the lease (quiet liveness: it counts a
        // busy node's silence from this placement).
        self.node.lease.heard(tokio::time::Instant::now());
        let req = rank_request(request.into_inner());
        let RankKey { job_id, rank } = req.key;
        // Spawned right here, in this handler's task on a runtime worker thread (see
        // `launch::command::command` for why not spawn_blocking).
        match self.node.launch_rank(req).await {
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

#[cfg(test)]
mod tests {
    use gang_core::MsgContext;

    use super::*;

    #[test]
    fn the_launch_mode_is_resolved_and_strict_when_unknown() {
        assert_eq!(
            launch_mode(proto::GangMode::Priority as i32),
            GangMode::Priority
        );
        assert_eq!(
            launch_mode(proto::GangMode::Freeze as i32),
            GangMode::Freeze
        );
        assert_eq!(launch_mode(proto::GangMode::None as i32), GangMode::None);
        assert_eq!(
            launch_mode(proto::GangMode::Unspecified as i32),
            GangMode::Stop
        );
        assert_eq!(launch_mode(99), GangMode::Stop);
    }

    #[test]
    fn the_mpi_interface_defaults_to_the_simple_protocol() {
        assert_eq!(mpi(proto::Mpi::Auto as i32), Mpi::Auto);
        assert_eq!(mpi(proto::Mpi::Pmix as i32), Mpi::Pmix);
        assert_eq!(mpi(proto::Mpi::None as i32), Mpi::None);
        assert_eq!(mpi(proto::Mpi::Pmi2 as i32), Mpi::Pmi2);
        assert_eq!(mpi(proto::Mpi::Pmi1 as i32), Mpi::Pmi1);
        assert_eq!(mpi(proto::Mpi::Unspecified as i32), Mpi::Pmi1);
        assert_eq!(mpi(99), Mpi::Pmi1);
    }

    #[test]
    fn a_launch_request_is_converted_whole() {
        let req = LaunchRequest {
            job_id: 7,
            rank: 3,
            size: 4,
            argv: vec!["prog".into()],
            cwd: "/data".into(),
            env: [("A".to_string(), "1".to_string())].into(),
            uid: 1000,
            gid: 100,
            stdin: true,
            gang: proto::GangMode::Freeze as i32,
            groups: vec![100, 27],
            user: "alice".into(),
            part: Some(proto::Submesh {
                x: 1,
                y: 2,
                w: 2,
                h: 1,
            }),
            msg_context: proto::MsgContext::SaveRestore as i32,
            mpi: proto::Mpi::Pmix as i32,
            mpi_check: true,
            output: "%j.out".into(),
            error: "%j.err".into(),
            namespace: "gang-0a1b2c3d-7".into(),
            fence_width: 0,
            fence_parent: String::new(),
            allocation: 0,
            script: String::new(),
            script_at: 0,
            pty: proto::Pty::Rank0 as i32,
        };
        let got = rank_request(req.clone());
        // A pseudo-terminal for rank 0 alone, or for every rank; unknown values: pipes.
        assert!(!got.pty);
        assert!(
            rank_request(LaunchRequest {
                rank: 0,
                ..req.clone()
            })
            .pty
        );
        let all = proto::Pty::All as i32;
        assert!(
            rank_request(LaunchRequest {
                pty: all,
                ..req.clone()
            })
            .pty
        );
        assert!(
            !rank_request(LaunchRequest {
                rank: 0,
                pty: 9,
                ..req
            })
            .pty
        );
        assert_eq!(got.namespace(), "gang-0a1b2c3d-7");
        assert_eq!(got.key, RankKey { job_id: 7, rank: 3 });
        assert_eq!(got.size, 4);
        assert_eq!(got.argv, ["prog"]);
        assert_eq!(got.cwd, "/data");
        assert_eq!(got.env["A"], "1");
        assert_eq!(
            got.submitter,
            Submitter {
                uid: 1000,
                gid: 100,
                groups: vec![100, 27],
                user: "alice".into(),
            }
        );
        assert!(got.stdin && got.mpi_check);
        assert_eq!(got.mode, GangMode::Freeze);
        assert_eq!(got.part, Some(Submesh::new(1, 2, 2, 1)));
        assert_eq!(got.msg_context, MsgContext::SaveRestore);
        assert_eq!(got.mpi, Mpi::Pmix);
        assert_eq!(
            (got.output.as_str(), got.error.as_str()),
            ("%j.out", "%j.err")
        );
        let defaults = rank_request(LaunchRequest::default());
        assert_eq!(defaults.msg_context, MsgContext::Resident);
        assert_eq!(defaults.part, None);
    }
}
