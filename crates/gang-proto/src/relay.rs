//! Carrying a signed order of the order tree down one subtree (`NodeRelay`), as the master
//! and every agent that forwards do it: call the subtree's head with the whole range; if it
//! cannot be reached, refuses, or does not answer within its bound, report it unreachable
//! and let the next node of the range head the rest. A dead or slow interior agent so
//! costs its subtree one bound, per dead head, and no more.
//!
//! Each head is given its subtree's bound (`gang_core::tree::route::subtree_bound`), so one
//! dead agent on a path costs only its own subtree, never its parent's.

use std::ops::Range;

use tonic::transport::Channel;

use crate::v1::node_relay_client::NodeRelayClient;
use crate::v1::{RelayOutcome, RelayRequest};

// The pure part (the order as a forwarder holds it, and a subtree's bound) is gang-core's.
use gang_core::tree::Route;

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
