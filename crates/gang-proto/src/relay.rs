//! Carrying a signed relay order down one subtree (`NodeRelay`), as the master and every
//! agent that forwards do it: call the subtree's head with the whole range; if it cannot
//! be reached, refuses, or does not answer within its bound, report it unreachable and let
//! the next node of the range head the rest. A dead or slow interior agent so costs its
//! subtree one bound, per dead head, and no more.
//!
//! The bound of a subtree of depth d (`gang_core::fanout::depth`) is `hop × (2^d − 1)`:
//! its head may wait out one dead head below it and route around it (twice the bound of
//! depth d − 1) and still answer within its own, so one dead agent on a path costs only
//! its own subtree, never its parent's.

use std::ops::Range;
use std::time::Duration;

use gang_core::fanout;
use tonic::transport::Channel;

use crate::v1::node_relay_client::NodeRelayClient;
use crate::v1::{RelayOutcome, RelayRequest};

/// One signed order and where its nodes listen, as a forwarder holds it.
#[derive(Debug, Clone)]
pub struct Route {
    pub order: Vec<u8>,
    pub signature: Vec<u8>,
    /// Every node of the order, unpacked.
    pub nodes: Vec<(u32, u32)>,
    /// Where `nodes[base..]` listen (the forwarder knows no more than its own range).
    pub base: usize,
    pub addresses: Vec<String>,
    pub width: u32,
    pub hop_timeout_ms: u32,
    /// Who forwards (for messages): "the master", "node (3,1)".
    pub from: String,
}

impl Route {
    /// How long a subtree of `n` nodes may take to answer.
    pub fn bound(&self, n: usize) -> Duration {
        let depth = fanout::depth(n, self.width as usize).min(20);
        Duration::from_millis(u64::from(self.hop_timeout_ms)) * ((1u32 << depth) - 1)
    }
}

/// The outcomes of `range` (its head first, unless it was routed around).
/// `parent_address`: where the forwarder listens (the heads' fence parent).
pub async fn forward<D>(
    route: &Route,
    mut range: Range<usize>,
    parent_address: &str,
    dial: D,
) -> Vec<RelayOutcome>
where
    D: Fn(u32, u32, &str) -> Result<NodeRelayClient<Channel>, String>,
{
    let mut out = Vec::new();
    while !range.is_empty() {
        let head = range.start;
        let (x, y) = route.nodes[head];
        let address = &route.addresses[head - route.base];
        let bound = route.bound(range.len());
        let req = RelayRequest {
            order: route.order.clone(),
            signature: route.signature.clone(),
            first: head as u32,
            end: range.end as u32,
            addresses: route.addresses[head - route.base..range.end - route.base].to_vec(),
            width: route.width,
            hop_timeout_ms: route.hop_timeout_ms,
            parent_address: parent_address.to_owned(),
        };
        let why = match dial(x, y, address) {
            Err(e) => format!("bad address {address}: {e}"),
            Ok(mut client) => match tokio::time::timeout(bound, client.relay(req)).await {
                Ok(Ok(answer)) => {
                    out.extend(answer.into_inner().outcomes);
                    return out;
                }
                Ok(Err(status)) => status.message().to_owned(),
                Err(_) => format!("no answer within {} ms", bound.as_millis()),
            },
        };
        out.push(RelayOutcome {
            x,
            y,
            unreachable: format!("node ({x},{y}) not reached from {}: {why}", route.from),
            ..Default::default()
        });
        range.start += 1;
    }
    out
}
