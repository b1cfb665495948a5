//! Channels to other agents (mutual TLS, each verified by its node's name): what the
//! order tree and fences among a job's agents travel on. One lazy channel per (node, address), kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use gang_auth::names::node_dns;
use gang_proto::v1::node_relay_client::NodeRelayClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Connecting to a peer (TCP only; calls bound the rest themselves).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A fence may wait long for its slowest rank: a dead peer is told from a slow one by
/// HTTP/2 pings, not by a deadline on the call. A ping unanswered for 20 s was not death
/// at 10,000 emulated nodes: a head in a process of 500 agents, busy with a launch on a
/// loaded host, answered later, and the launch failed on "keep-alive timed out". A node
/// that is really gone is declared so by the master (node timeout), whose end of the job
/// ends its fences; the relay asks a silent head `Alive` within a hop's bound.
const KEEPALIVE: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// A job's whole key-value space comes back from a fence (PMI puts are bounded per rank,
/// not per job).
pub const MAX_MESSAGE: usize = 256 << 20;

/// What calling peers needs: this node's identity and the cluster CA.
#[derive(Clone)]
pub struct PeerTls {
    pub ca: Certificate,
    pub identity: Identity,
}

pub struct PeerPool {
    tls: PeerTls,
    channels: Mutex<HashMap<(u32, u32, String), Channel>>,
}

impl std::fmt::Debug for PeerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerPool").finish_non_exhaustive()
    }
}

impl PeerPool {
    pub fn new(tls: PeerTls) -> Self {
        PeerPool {
            tls,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// A client of node (x,y)'s agent at `address`.
    pub fn tree_client(
        &self,
        x: u32,
        y: u32,
        address: &str,
    ) -> Result<NodeRelayClient<Channel>, String> {
        let mut channels = self.channels.lock().expect("peer pool lock");
        let key = (x, y, address.to_owned());
        let channel = match channels.get(&key) {
            Some(c) => c.clone(),
            None => {
                let hostport = address.split_once("://").map_or(address, |(_, rest)| rest);
                let tls = ClientTlsConfig::new()
                    .ca_certificate(self.tls.ca.clone())
                    .identity(self.tls.identity.clone())
                    .domain_name(node_dns(x, y));
                let c = Endpoint::from_shared(format!("https://{hostport}"))
                    .and_then(|e| e.tls_config(tls))
                    .map_err(|e| format!("bad address {address}: {e}"))?
                    .connect_timeout(CONNECT_TIMEOUT)
                    .http2_keep_alive_interval(KEEPALIVE)
                    .keep_alive_timeout(KEEPALIVE_TIMEOUT)
                    .keep_alive_while_idle(false)
                    .tcp_nodelay(true)
                    .connect_lazy();
                channels.insert(key, c.clone());
                c
            }
        };
        Ok(NodeRelayClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE))
    }
}
