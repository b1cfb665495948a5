//! The master's calls to its agents (NodeAgent): launch, signal, set table. Each runs in
//! its own task; outcomes the state needs come back to the actor as commands.

use std::sync::Arc;

use gang_core::JobId;
use gang_proto::v1;
use tokio::sync::mpsc;
use tonic::Status;
use tracing::{debug, warn};

use crate::actor::Cmd;
use crate::agents::AgentPool;
use crate::state::effects::{Coord, LaunchOrder, NodeTable};
use crate::state::events::LaunchFailure;

/// `fence`: the width of the job's fence tree and this rank's parent's address (width 0:
/// fences through the master).
pub fn launch(
    agents: &Arc<AgentPool>,
    tx: &mpsc::Sender<Cmd>,
    (node, addr): (Coord, &str),
    cluster_id: &str,
    order: LaunchOrder,
    (fence_width, fence_parent): (u32, String),
) {
    let client = agents.client(node, addr);
    let tx = tx.clone();
    let (job, rank) = (order.job, order.rank);
    let mut req = launch_request(order, cluster_id);
    req.fence_width = fence_width;
    req.fence_parent = fence_parent;
    tokio::spawn(async move {
        let result = match client {
            Ok(mut c) => c
                .launch(req)
                .await
                .map(|r| r.into_inner().pid)
                .map_err(|s| launch_failure(&s, node)),
            Err(e) => Err(LaunchFailure::Unreachable {
                node,
                detail: format!("bad agent address: {e}"),
            }),
        };
        let _ = tx.send(Cmd::Launched(job, vec![(rank, result)])).await;
    });
}

pub fn signal(agents: &Arc<AgentPool>, (x, y): Coord, addr: &str, job: JobId, grace_ms: u32) {
    let Ok(mut client) = agents.client((x, y), addr) else {
        return;
    };
    tokio::spawn(async move {
        let req = v1::SignalRequest {
            job_id: job.0,
            grace_ms,
        };
        if let Err(s) = client.signal(req).await {
            let error = gang_proto::relay::transport_why(&s);
            warn!(%job, node = %format!("{x},{y}"), %error, "signal failed");
        }
    });
}

pub fn set_table(
    agents: &Arc<AgentPool>,
    tx: &mpsc::Sender<Cmd>,
    node: Coord,
    addr: &str,
    table: NodeTable,
) {
    let Ok(mut client) = agents.client(node, addr) else {
        return;
    };
    let tx = tx.clone();
    let req = node_table(&table);
    let version = table.version;
    tokio::spawn(async move {
        match client.set_table(req).await {
            Ok(r) => {
                let acked = vec![(node, r.into_inner().version)];
                let _ = tx.send(Cmd::TablesAcked(acked)).await;
            }
            Err(s) => {
                debug!(node = %format!("{},{}", node.0, node.1), error = %s.message(), "slice table not delivered");
                let _ = tx.send(Cmd::TablesLost(vec![(node, version)])).await;
            }
        }
    });
}

pub(super) fn launch_request(o: LaunchOrder, cluster_id: &str) -> v1::LaunchRequest {
    let s = &*o.spec;
    v1::LaunchRequest {
        namespace: format!("gang-{cluster_id}-{}", o.job.0),
        job_id: o.job.0,
        rank: o.rank,
        size: o.size,
        argv: s.argv.clone(),
        cwd: s.cwd.clone(),
        env: s.env.clone().into_iter().collect(),
        uid: s.owner.uid,
        gid: s.owner.gid,
        groups: s.owner.groups.clone(),
        user: s.owner.user.clone(),
        stdin: s.stdin,
        gang: v1::GangMode::from(s.gang) as i32,
        part: Some(o.part.into()),
        msg_context: v1::MsgContext::from(s.msg_context) as i32,
        mpi: v1::Mpi::from(s.mpi) as i32,
        mpi_check: s.mpi_check,
        output: s.output_files.output.clone(),
        error: s.output_files.error.clone(),
        fence_width: 0,
        fence_parent: String::new(),
        allocation: if s.allocate {
            o.job.0
        } else {
            s.allocation.map_or(0, |a| a.0)
        },
        script: s
            .script
            .as_ref()
            .map(|b| b.text.clone())
            .unwrap_or_default(),
        script_at: s.script.as_ref().map_or(0, |b| b.at),
        pty: v1::Pty::from(s.pty) as i32,
    }
}

pub(super) fn node_table(t: &NodeTable) -> v1::NodeTable {
    v1::NodeTable {
        version: t.version,
        epoch_ns: t.grid.epoch_ns,
        quantum_ns: t.grid.quantum_ns,
        effective_ns: t.effective_ns,
        rows: t.rows.iter().map(|j| j.map_or(0, |j| j.0)).collect(),
        parked: t.parked.iter().map(|j| j.0).collect(),
    }
}

/// Why an agent's Launch failed. The agent answers a refusal with a status naming its
/// node; a broken or refused connection is the transport's, and says nothing of the node:
/// its causes are kept (at 10,000 flat nodes "tcp open error" was the master's own
/// descriptors running out, which only the cause says).
fn launch_failure(s: &Status, node: Coord) -> LaunchFailure {
    use tonic::Code;
    match s.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            LaunchFailure::Unreachable {
                node,
                detail: gang_proto::relay::transport_why(s),
            }
        }
        _ => LaunchFailure::Refused(s.message().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connect that fails on the master's own descriptor limit says so: the node is not
    /// what failed.
    #[test]
    fn an_unreachable_agent_s_detail_keeps_the_transport_s_causes() {
        let mut s = Status::unavailable("tcp open error");
        let emfile = std::io::Error::from_raw_os_error(nix::libc::EMFILE);
        s.set_source(Arc::new(emfile));
        match launch_failure(&s, (68, 1)) {
            LaunchFailure::Unreachable { node, detail } => {
                assert_eq!(node, (68, 1));
                assert!(detail.starts_with("tcp open error: "), "{detail}");
                assert!(detail.contains("Too many open files"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        let refused = launch_failure(&Status::invalid_argument("no such user"), (0, 0));
        assert!(matches!(refused, LaunchFailure::Refused(m) if m == "no such user"));
    }
}
