//! The order tree (wire service NodeRelay): orders of the master for many nodes (a job's launch and signal, slice
//! tables), carried down a tree of agents (`gang_core::tree::fanout`). An agent checks the
//! master's signature on the order, starts forwarding the rest of its range to its
//! subtrees, does its own part, and answers with every outcome of its range.
//!
//! A subtree whose head cannot be reached, refuses, or does not answer within its bound
//! (`gang_proto::relay`: doubling with each level of the subtree) is routed around: the head is reported
//! unreachable and the next node of that range heads it. The order may then reach a node
//! twice (through the slow head and around it): launching a rank that is already here
//! counts as done, signals and tables are idempotent.
//!
//! Trust: any node may call NodeRelay.Relay (the interceptor admits the master and node
//! certificates), but only the master's signature makes an order; an order carries its
//! expiry (against replays) and lists the nodes, while the addresses, which only route,
//! travel unsigned (a wrong one fails the TLS check of the node's name). An interior node
//! can still drop or misreport its subtree's outcomes: the master's heartbeats and exit
//! reports, not the order tree's answers, are what keep its state honest.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use gang_auth::PeerName;
use gang_auth::peer::peer_name;
use gang_core::tree::Route;
use gang_core::tree::fanout;
use gang_proto::relay;
use gang_proto::v1::node_relay_server::NodeRelay;
use gang_proto::v1::relay_order::Work;
use gang_proto::v1::{
    AliveRequest, AliveResponse, BeatRequest, BeatResponse, FenceUpAnswer, FenceUpRequest,
    FenceUpResponse, ModexRequest, ModexResponse, RankExits, RankExitsAck, RelayOutcome,
    RelayRequest, RelayResponse,
};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::error::{AgentError, Coord};
use crate::msg::fence_tree::FenceError;
use crate::node::Node;
use crate::peers::PeerPool;
use crate::service::rank_request;
use crate::tree::verified::{Opened, Unopened};

/// Bounds on what an order may ask (a node cannot be asked to fan out to thousands).
pub const MAX_WIDTH: u32 = 256;
pub const MAX_NODES: usize = 1 << 20;
const HOP_TIMEOUT_MS: Range<u32> = 100..600_001;

#[derive(Clone)]
pub struct OrderTree(Arc<Inner>);

struct Inner {
    node: Arc<Node>,
    peers: Arc<PeerPool>,
    /// Where this agent listens, as the master knows it: the fence parent of the heads
    /// it forwards to.
    address: String,
}

/// A checked order, shared by the tasks that forward it.
struct Checked {
    route: Route,
    /// The fence parent of this node's rank in a launch that came down the tree.
    parent_address: String,
    /// The range this node heads.
    range: Range<usize>,
    /// The order, decoded (shared by the nodes of this process it reaches).
    opened: Arc<Opened>,
}

impl OrderTree {
    pub fn new(node: Arc<Node>, peers: Arc<PeerPool>, address: String) -> Self {
        OrderTree(Arc::new(Inner {
            node,
            peers,
            address,
        }))
    }

    /// The order, if the master signed it, it is for a range that starts with this node,
    /// and it has not expired.
    fn check(&self, request: RelayRequest) -> Result<Checked, Status> {
        let node = &self.0.node;
        let refuse =
            |what: String| Status::invalid_argument(format!("node {}: {what}", node.coord));
        let Some(key) = node.order_key.get() else {
            return Err(Status::failed_precondition(format!(
                "node {}: no relay key (not registered with a master that relays)",
                node.coord
            )));
        };
        let opened = match super::verified::open(&key, &request.order, &request.signature) {
            Ok(o) => o,
            Err(Unopened::NotSigned) => {
                warn!("refused a relay order not signed by the master");
                return Err(Status::permission_denied(format!(
                    "node {}: the relay order is not signed by the master",
                    node.coord
                )));
            }
            Err(Unopened::Undecodable(e)) => {
                return Err(refuse(format!("undecodable relay order: {e}")));
            }
        };
        let order = &opened.order;
        let now = node.clock.master_now_ns();
        if now > order.expires_ns.saturating_add(node.clock.error_ns()) {
            return Err(refuse(format!(
                "the relay order expired {:.1} s ago",
                (now - order.expires_ns) as f64 / 1e9
            )));
        }
        let n = order.nodes.len();
        let (first, end) = (request.first as usize, request.end as usize);
        if request.addresses.len() > MAX_NODES {
            return Err(refuse(format!("more than {MAX_NODES} addresses")));
        }
        if n > MAX_NODES || first >= end || end > n {
            return Err(refuse(format!(
                "relay range {first}..{end} of {n} nodes (at most {MAX_NODES})"
            )));
        }
        if request.addresses.len() != end - first {
            return Err(refuse(format!(
                "{} addresses for a range of {} nodes",
                request.addresses.len(),
                end - first
            )));
        }
        if !(1..=MAX_WIDTH).contains(&request.width)
            || !HOP_TIMEOUT_MS.contains(&request.hop_timeout_ms)
        {
            return Err(refuse(format!(
                "relay width {} (1 to {MAX_WIDTH}) or hop timeout {} ms ({} to {})",
                request.width,
                request.hop_timeout_ms,
                HOP_TIMEOUT_MS.start,
                HOP_TIMEOUT_MS.end - 1
            )));
        }
        let nodes = Arc::clone(&opened.nodes);
        if nodes[first] != (node.coord.x, node.coord.y) {
            let (x, y) = nodes[first];
            return Err(refuse(format!("the relay names node ({x},{y}) first")));
        }
        match &order.work {
            None => return Err(refuse("a relay order with no work".into())),
            Some(Work::Tables(t)) => {
                if order.table_of.len() != n
                    || order
                        .table_of
                        .iter()
                        .any(|&i| i as usize >= t.distinct.len())
                {
                    return Err(refuse("relay tables do not name one table per node".into()));
                }
            }
            Some(Work::Launch(l)) if l.part.is_none() => {
                return Err(refuse("a relayed launch without the job's part".into()));
            }
            Some(_) => {}
        }
        // Proof the master was alive when it signed this: a busy node's lease counts it.
        node.lease.heard(tokio::time::Instant::now());
        Ok(Checked {
            parent_address: request.parent_address,
            route: Route {
                order: request.order,
                signature: request.signature,
                nodes,
                base: first,
                addresses: request.addresses,
                width: request.width,
                hop_timeout_ms: request.hop_timeout_ms,
                from: format!("node {}", node.coord),
            },
            range: first..end,
            opened,
        })
    }

    /// This node's part of the order.
    async fn own_part(&self, c: &Checked) -> RelayOutcome {
        let node = &self.0.node;
        let i = c.range.start;
        let (x, y) = c.route.nodes[i];
        let mut out = RelayOutcome {
            x,
            y,
            ..Default::default()
        };
        let done: Result<u64, String> = match c.opened.order.work.as_ref().expect("checked") {
            Work::Launch(template) => {
                let part = template.part.expect("checked");
                match rank_in(&part, x, y) {
                    None => Err(format!(
                        "node {} is not in the job's part {}x{} at ({},{})",
                        node.coord, part.w, part.h, part.x, part.y
                    )),
                    Some(rank) => {
                        let mut req = template.clone();
                        req.stdin = template.stdin && rank == 0;
                        req.rank = rank;
                        req.fence_parent = c.parent_address.clone();
                        match node.launch_rank(rank_request(req)).await {
                            Ok(pid) => Ok(u64::from(pid)),
                            // It came twice (around a slow agent): it is here, as asked.
                            Err(AgentError::Duplicate { .. }) => Ok(0),
                            Err(e) => Err(Status::from(e).message().to_owned()),
                        }
                    }
                }
            }
            Work::Signal(s) => Ok(u64::from(
                node.signal(s.job_id, Duration::from_millis(u64::from(s.grace_ms))),
            )),
            Work::Tables(t) => {
                let table = t.distinct[c.opened.order.table_of[i] as usize].clone();
                node.switch
                    .set_table(table)
                    .map_err(|what| format!("node {}: slice table refused: {what}", node.coord))
            }
        };
        match done {
            Ok(v) => out.value = v,
            Err(e) => out.refused = e,
        }
        out
    }
}

/// Rank r of a job sits at row-major position r of its part.
fn rank_in(part: &gang_proto::v1::Submesh, x: u32, y: u32) -> Option<u32> {
    let inside = x >= part.x && y >= part.y && x - part.x < part.w && y - part.y < part.h;
    inside.then(|| (y - part.y) * part.w + (x - part.x))
}

#[tonic::async_trait]
impl NodeRelay for OrderTree {
    /// A child's heartbeat, for this node's next batch (`tree::beats`).
    async fn beat(&self, request: Request<BeatRequest>) -> Result<Response<BeatResponse>, Status> {
        let from = match request
            .peer_certs()
            .and_then(|chain| chain.first().map(|leaf| peer_name(leaf.as_ref())))
        {
            Some(Some(PeerName::Node { x, y })) => Coord { x, y },
            _ => {
                return Err(Status::permission_denied(
                    "only a node this node heads may send it its heartbeat",
                ));
            }
        };
        let now = tokio::time::Instant::now();
        let answer = self.0.node.liveness.beat(from, request.into_inner(), now)?;
        Ok(Response::new(answer))
    }

    async fn relay(
        &self,
        request: Request<RelayRequest>,
    ) -> Result<Response<RelayResponse>, Status> {
        let c = Arc::new(self.check(request.into_inner())?);
        let subtrees = fanout::children(c.range.clone(), c.route.width as usize);
        // The subtrees first: nobody below waits for this node's own part.
        let forwards: Vec<_> = subtrees
            .into_iter()
            .map(|r| {
                let (me, c) = (self.clone(), Arc::clone(&c));
                tokio::spawn(async move {
                    let parent = me.0.address.clone();
                    relay::forward(&c.route, r, &parent, |x, y, a| {
                        me.0.peers.tree_client(x, y, a)
                    })
                    .await
                })
            })
            .collect();
        let mut outcomes = vec![self.own_part(&c).await];
        for f in forwards {
            match f.await {
                Ok(mut o) => outcomes.append(&mut o),
                Err(e) => warn!("forwarding an order down the tree failed: {e}"),
            }
        }
        Ok(Response::new(RelayResponse { outcomes }))
    }

    async fn modex(
        &self,
        request: Request<ModexRequest>,
    ) -> Result<Response<ModexResponse>, Status> {
        let node = &self.0.node;
        let from = caller_node(
            &request,
            node.coord,
            "another node of the job may ask for a rank's data",
        )?;
        let blob = node.msg.pmix_modex(from, request.get_ref()).await?;
        Ok(Response::new(ModexResponse { blob }))
    }

    async fn fence_up(
        &self,
        request: Request<FenceUpRequest>,
    ) -> Result<Response<FenceUpResponse>, Status> {
        let node = &self.0.node;
        let from = caller_node(&request, node.coord, FENCE_CALLERS)?;
        fence_answer(node, from, request.into_inner())
            .await
            .map(Response::new)
    }

    type FenceStreamStream = FenceAnswers;

    async fn fence_stream(
        &self,
        request: Request<tonic::Streaming<FenceUpRequest>>,
    ) -> Result<Response<FenceAnswers>, Status> {
        let node = Arc::clone(&self.0.node);
        let from = caller_node(&request, node.coord, FENCE_CALLERS)?;
        // Read one request, answer it, then read the next: the answer's stream is
        // polled by the connection, so no task of its own, and a child that sends
        // ahead is not read ahead (it has one fence of a job in flight).
        let answers = request.into_inner().then(move |r| {
            let node = Arc::clone(&node);
            async move {
                let answer = match fence_answer(&node, from, r?).await {
                    Ok(response) => FenceUpAnswer {
                        response: Some(response),
                        ..Default::default()
                    },
                    Err(s) => FenceUpAnswer {
                        response: None,
                        code: s.code() as i32,
                        message: s.message().to_owned(),
                    },
                };
                Ok(answer)
            }
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn exits_up(
        &self,
        request: Request<RankExits>,
    ) -> Result<Response<RankExitsAck>, Status> {
        let node = &self.0.node;
        let from = caller_node(
            &request,
            node.coord,
            "a node of the job may pass on its subtree's exits",
        )?;
        node.exits.from_child(request.into_inner(), from)?;
        Ok(Response::new(RankExitsAck {}))
    }

    async fn alive(
        &self,
        _request: Request<AliveRequest>,
    ) -> Result<Response<AliveResponse>, Status> {
        Ok(Response::new(AliveResponse {}))
    }
}

/// Who may send a part of a fence.
const FENCE_CALLERS: &str = "another node of the job may send its part of a fence";

/// What a FenceStream answers, message by message.
pub type FenceAnswers = tonic::codegen::BoxStream<FenceUpAnswer>;

/// A child's part of a fence (from node `from`, its certificate's), once the fence is
/// complete: the space, or the error the child acts on (retry, or send everything).
async fn fence_answer(
    node: &Node,
    from: Coord,
    r: FenceUpRequest,
) -> Result<FenceUpResponse, Status> {
    let puts = r.puts.into_iter().collect();
    match node
        .msg
        .fence_up(r.job_id, r.epoch, r.rank, from, puts, r.known_epoch)
        .await
    {
        Ok(done) => {
            let (delta, kvs) = done.for_child(r.known_epoch);
            Ok(FenceUpResponse {
                kvs: kvs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                delta,
            })
        }
        // Retried by the child: this node's rank may not be launched yet.
        Err(e @ FenceError::NoJob(_)) => {
            Err(Status::not_found(format!("node {}: {e}", node.coord)))
        }
        Err(FenceError::Refused(m)) => Err(Status::permission_denied(m)),
        Err(e @ FenceError::NotHeld { .. }) => Err(Status::failed_precondition(format!(
            "node {}: {e}",
            node.coord
        ))),
        Err(FenceError::Parent(m)) => Err(Status::aborted(format!(
            "node {}: the fence failed above: {m}",
            node.coord
        ))),
    }
}

/// The node the caller's certificate names; any other caller is refused, told that only
/// `who_may` ("a node of the job may ...").
fn caller_node<T>(request: &Request<T>, here: Coord, who_may: &str) -> Result<Coord, Status> {
    let leaf = request
        .peer_certs()
        .and_then(|chain| chain.first().cloned());
    match leaf.and_then(|l| peer_name(l.as_ref())) {
        Some(PeerName::Node { x, y }) => Ok(Coord { x, y }),
        _ => Err(Status::permission_denied(format!(
            "node {here}: only {who_may}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::Submesh;

    #[test]
    fn a_nodes_rank_is_its_row_major_place_in_the_part() {
        let part = Submesh {
            x: 2,
            y: 1,
            w: 3,
            h: 2,
        };
        assert_eq!(rank_in(&part, 2, 1), Some(0));
        assert_eq!(rank_in(&part, 4, 1), Some(2));
        assert_eq!(rank_in(&part, 3, 2), Some(4));
        assert_eq!(rank_in(&part, 5, 1), None);
        assert_eq!(rank_in(&part, 1, 1), None);
        assert_eq!(rank_in(&part, 2, 3), None);
    }
}
