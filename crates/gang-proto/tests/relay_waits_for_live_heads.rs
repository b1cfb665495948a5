//! `relay::forward` against real gRPC servers on loopback: a head slower than its bound
//! but alive is waited for, and its outcomes come back; a head that answers neither the
//! order nor `Alive` is reported unreachable and the next node heads the rest.

use std::time::{Duration, Instant};

use gang_core::tree::Route;
use gang_proto::relay;
use gang_proto::v1::node_relay_client::NodeRelayClient;
use gang_proto::v1::node_relay_server::{NodeRelay, NodeRelayServer};
use gang_proto::v1::*;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

/// A head whose Relay answers after `delay` with one outcome per node of its range; with
/// `wedged`, neither Relay nor Alive ever answers (a stopped process).
#[derive(Clone)]
struct Head {
    delay: Duration,
    wedged: bool,
}

#[tonic::async_trait]
impl NodeRelay for Head {
    async fn relay(&self, r: Request<RelayRequest>) -> Result<Response<RelayResponse>, Status> {
        if self.wedged {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(self.delay).await;
        let r = r.into_inner();
        let outcomes = (r.first..r.end)
            .map(|i| RelayOutcome {
                x: i,
                y: 0,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RelayResponse { outcomes }))
    }
    async fn fence_up(
        &self,
        _: Request<FenceUpRequest>,
    ) -> Result<Response<FenceUpResponse>, Status> {
        Err(Status::unimplemented("test head"))
    }
    type FenceStreamStream = tonic::codegen::BoxStream<FenceUpAnswer>;
    async fn fence_stream(
        &self,
        _: Request<tonic::Streaming<FenceUpRequest>>,
    ) -> Result<Response<Self::FenceStreamStream>, Status> {
        Err(Status::unimplemented("test head"))
    }
    async fn exits_up(&self, _: Request<RankExits>) -> Result<Response<RankExitsAck>, Status> {
        Err(Status::unimplemented("test head"))
    }
    async fn modex(&self, _: Request<ModexRequest>) -> Result<Response<ModexResponse>, Status> {
        Err(Status::unimplemented("test head"))
    }
    async fn beat(&self, _: Request<BeatRequest>) -> Result<Response<BeatResponse>, Status> {
        Err(Status::unimplemented("test head"))
    }
    async fn alive(&self, _: Request<AliveRequest>) -> Result<Response<AliveResponse>, Status> {
        if self.wedged {
            std::future::pending::<()>().await;
        }
        Ok(Response::new(AliveResponse {}))
    }
}

async fn serve(head: Head) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        Server::builder()
            .add_service(NodeRelayServer::new(head))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

fn route(addresses: Vec<String>, hop_ms: u32) -> Route {
    Route {
        order: vec![],
        signature: vec![],
        nodes: (0..addresses.len() as u32).map(|i| (i, 0)).collect(),
        base: 0,
        addresses,
        width: 16,
        hop_timeout_ms: hop_ms,
        from: "the test".into(),
    }
}

fn dial(_: u32, _: u32, a: &str) -> Result<NodeRelayClient<Channel>, String> {
    let ch = Channel::from_shared(format!("http://{a}"))
        .map_err(|e| e.to_string())?
        .connect_lazy();
    Ok(NodeRelayClient::new(ch))
}

#[tokio::test]
async fn a_slow_live_head_is_waited_for_past_its_bound() {
    // The order's bound for 3 nodes is a few hops of 200 ms; the head takes 2 s.
    let slow = serve(Head {
        delay: Duration::from_secs(2),
        wedged: false,
    })
    .await;
    let r = route(vec![slow.clone(), slow.clone(), slow], 200);
    let outcomes = relay::forward(&r, 0..3, "", dial).await;
    let reached: Vec<u32> = outcomes
        .iter()
        .filter(|o| o.unreachable.is_empty())
        .map(|o| o.x)
        .collect();
    assert_eq!(reached, [0, 1, 2], "{outcomes:?}");
}

#[tokio::test]
async fn a_silent_head_is_routed_around_after_its_bound_and_one_hop() {
    let dead = serve(Head {
        delay: Duration::ZERO,
        wedged: true,
    })
    .await;
    let live = serve(Head {
        delay: Duration::ZERO,
        wedged: false,
    })
    .await;
    let r = route(vec![dead, live.clone(), live], 200);
    let started = Instant::now();
    let outcomes = relay::forward(&r, 0..3, "", dial).await;
    let took = started.elapsed();
    assert!(
        outcomes[0]
            .unreachable
            .contains("nor to whether it is alive"),
        "{outcomes:?}"
    );
    let reached: Vec<u32> = outcomes
        .iter()
        .filter(|o| o.unreachable.is_empty())
        .map(|o| o.x)
        .collect();
    assert_eq!(reached, [1, 2]);
    // The bound of 3 nodes (at most a few hops) and the Alive hop, then the rest at once.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[tokio::test]
async fn a_head_whose_host_refuses_is_routed_around_at_once() {
    // A port nothing listens on: bound, then closed.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let live = serve(Head {
        delay: Duration::ZERO,
        wedged: false,
    })
    .await;
    let r = route(vec![gone, live], 5_000);
    let started = Instant::now();
    let outcomes = relay::forward(&r, 0..2, "", dial).await;
    assert!(!outcomes[0].unreachable.is_empty(), "{outcomes:?}");
    assert!(outcomes[1].unreachable.is_empty(), "{outcomes:?}");
    // Not retried for the 5 s bound: a refusal is a death.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}
