//! Carrying a signed order of the order tree down one subtree (`NodeRelay`), as the master
//! and every agent that forwards do it: call the subtree's head with the whole range; if it
//! cannot be reached, refuses, or does not answer within its bound, report it unreachable
//! and let the next node of the range head the rest. A dead or slow interior agent so
//! costs its subtree one bound, per dead head, and no more.
//!
//! Each head is given its subtree's bound (`gang_core::tree::route::subtree_bound`, or
//! longer where this forwarder measured its subtrees slower: `gang_core::tree::hop_time`),
//! so one dead agent on a path costs only its own subtree, never its parent's. A bound
//! that runs out only makes the forwarder ask the head `Alive` (within one hop's bound):
//! a head that answers is slow, not dead, and is waited for again, up to
//! `hop_time::CEILING` in all; one that does not is routed around. A timeout claims a
//! death, so it is made only when the head is silent too.

use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gang_core::tree::hop_time::{CEILING, HopTime};
use tonic::transport::Channel;

use crate::v1::node_relay_client::NodeRelayClient;
use crate::v1::{AliveRequest, RelayOutcome, RelayRequest};

/// What this process's forwarding measured (one estimate per process: the master, an
/// agent, or an emulating process of many agents, whose hops share its cores).
static MEASURED: Mutex<HopTime> = Mutex::new(HopTime::new());

fn measured() -> std::sync::MutexGuard<'static, HopTime> {
    MEASURED.lock().unwrap_or_else(|p| p.into_inner())
}

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
        let bound = measured().bound(range.len(), route.bound(range.len()));
        let hop = Duration::from_millis(u64::from(route.hop_timeout_ms));
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
            Ok(client) => match call_head_patiently(client, req, bound, hop).await {
                Ok(outcomes) => {
                    out.extend(outcomes);
                    return out;
                }
                Err(why) => why,
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

/// How long apart a head whose connection failed is called again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// [`call_head`], again while the connection to the head fails for any reason but a
/// refusal (nothing listens there: the agent is gone) and its bound lasts: a loaded host
/// may take longer than a connection's 2 s to accept and shake hands, and that is no
/// death.
async fn call_head_patiently(
    client: NodeRelayClient<Channel>,
    req: RelayRequest,
    bound: Duration,
    hop: Duration,
) -> Result<Vec<RelayOutcome>, String> {
    let started = Instant::now();
    loop {
        match call_head(client.clone(), req.clone(), bound, hop).await {
            Err(Failed::Transport(status))
                if !refused(&status) && started.elapsed() + RECONNECT_PAUSE < bound =>
            {
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
            Err(Failed::Transport(status)) => return Err(transport_why(&status)),
            Err(Failed::Said(why)) => return Err(why),
            Ok(outcomes) => return Ok(outcomes),
        }
    }
}

/// A transport failure's message and its causes (connect, TLS, HTTP/2): "transport
/// error" alone tells an admin nothing, nor does "tcp open error" when the caller itself
/// is out of descriptors.
pub fn transport_why(status: &tonic::Status) -> String {
    use std::error::Error;
    match status.source() {
        Some(cause) => {
            let causes = crate::client::error_chain(cause);
            if causes.contains(status.message()) {
                causes
            } else {
                format!("{}: {causes}", status.message())
            }
        }
        None => status.message().to_owned(),
    }
}

/// Whether a call failed with its connection rather than by the head's word: unavailable
/// (connect, TLS, reset), or cancelled by hyper when the connection under it closed
/// ("operation was canceled": once at 10,000 emulated nodes, where the head was slow).
fn connection_lost(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Cancelled
    )
}

/// Why a call to a head failed: its connection, or anything else (said).
enum Failed {
    Transport(tonic::Status),
    Said(String),
}

/// Whether a call failed because the peer's host refused the connection: nothing
/// listens there (a relay head, or the master, is gone rather than slow).
pub fn refused(status: &tonic::Status) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(err) = e {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        e = err.source();
    }
    false
}

/// Call a subtree's head: its outcomes, or why it is taken for unreachable. Past `bound`
/// the head is asked whether it is alive (answering within `hop`); while it is, the call
/// is waited for, `bound` at a time, up to `CEILING` in all.
async fn call_head(
    mut client: NodeRelayClient<Channel>,
    req: RelayRequest,
    bound: Duration,
    hop: Duration,
) -> Result<Vec<RelayOutcome>, Failed> {
    let n = (req.end - req.first) as usize;
    let mut probe = client.clone();
    let started = Instant::now();
    let call = client.relay(req);
    tokio::pin!(call);
    loop {
        match tokio::time::timeout(bound, &mut call).await {
            Ok(Ok(answer)) => {
                measured().record(n, started.elapsed());
                return Ok(answer.into_inner().outcomes);
            }
            Ok(Err(status)) if connection_lost(&status) => {
                return Err(Failed::Transport(status));
            }
            Ok(Err(status)) => return Err(Failed::Said(status.message().to_owned())),
            Err(_) => {
                let waited = started.elapsed();
                if waited >= CEILING {
                    return Err(Failed::Said(format!(
                        "alive, but no answer within {} s (the most a subtree is waited for)",
                        waited.as_secs()
                    )));
                }
                // The call goes on while the head is asked: its answer may come first.
                let asked = tokio::time::timeout(hop, probe.alive(AliveRequest {}));
                tokio::select! {
                    r = &mut call => match r {
                        Ok(answer) => {
                            measured().record(n, started.elapsed());
                            return Ok(answer.into_inner().outcomes);
                        }
                        Err(status) if connection_lost(&status) => {
                            return Err(Failed::Transport(status));
                        }
                        Err(status) => return Err(Failed::Said(status.message().to_owned())),
                    },
                    alive = asked => match alive {
                        Ok(Ok(_)) => continue,
                        // Any answer of its own (an agent too old to know Alive) is alive;
                        // a transport failure is not.
                        Ok(Err(status)) if !connection_lost(&status) => continue,
                        Ok(Err(status)) => {
                            return Err(Failed::Said(format!(
                                "no answer within {} ms, and asked whether alive: {}",
                                waited.as_millis(),
                                transport_why(&status)
                            )));
                        }
                        Err(_) => {
                            return Err(Failed::Said(format!(
                                "no answer within {} ms, nor to whether it is alive within {} ms",
                                waited.as_millis(),
                                hop.as_millis()
                            )));
                        }
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason a node is routed around names what failed beneath "transport error".
    #[test]
    fn a_transport_failure_s_reason_names_its_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "tls handshake eof");
        let mut status = tonic::Status::from_error(Box::new(io));
        assert_eq!(transport_why(&status), "tls handshake eof");
        status = tonic::Status::unavailable("transport error");
        assert_eq!(transport_why(&status), "transport error");
        let wrapped = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ));
        let status = tonic::Status::from_error(Box::new(wrapped));
        assert!(
            transport_why(&status).contains("connection reset by peer"),
            "{}",
            transport_why(&status)
        );
    }
}
