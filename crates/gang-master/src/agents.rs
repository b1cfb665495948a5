//! Clients of the node agents, one channel per (node, address), made on first use. Every
//! channel is mutual TLS: the master's certificate is its identity, and the agent must
//! prove it is the node the master means (its certificate names `node-X-Y.gang`), whatever
//! address it registered.

use std::collections::HashMap;
use std::sync::Mutex;

use gang_auth::names::node_dns;
use gang_auth::pki::TlsPem;
use gang_auth::relay_key::RelaySigner;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::node_relay_client::NodeRelayClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::Fanout;
use crate::state::views::Coord;

pub struct AgentPool {
    tls: TlsPem,
    channels: Mutex<HashMap<(Coord, String), Channel>>,
    /// Signs orders relayed through agents (its public half goes out at registration).
    pub signer: RelaySigner,
    pub fanout: Fanout,
}

impl AgentPool {
    pub fn new(tls: TlsPem, fanout: Fanout) -> Self {
        AgentPool {
            signer: RelaySigner::from_master_key(tls.key.as_bytes()),
            tls,
            channels: Mutex::new(HashMap::new()),
            fanout,
        }
    }

    fn endpoint(&self, (x, y): Coord, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        let hostport = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.tls.ca))
            .identity(Identity::from_pem(&self.tls.cert, &self.tls.key))
            .domain_name(node_dns(x, y));
        Ok(Endpoint::from_shared(format!("https://{hostport}"))?
            .tls_config(tls)?
            .connect_timeout(std::time::Duration::from_secs(2))
            .tcp_nodelay(true))
    }

    /// The channel to the agent of `node` at `addr` (connects lazily, reconnects).
    fn channel(&self, node: Coord, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut channels = self.channels.lock().expect("agent pool lock");
        let key = (node, addr.to_string());
        if let Some(c) = channels.get(&key) {
            return Ok(c.clone());
        }
        let c = self.endpoint(node, addr)?.connect_lazy();
        channels.insert(key, c.clone());
        Ok(c)
    }

    /// A client for the agent of `node` at `addr`.
    pub fn client(
        &self,
        node: Coord,
        addr: &str,
    ) -> Result<NodeAgentClient<Channel>, tonic::transport::Error> {
        Ok(NodeAgentClient::new(self.channel(node, addr)?))
    }

    /// A relay client for the agent of `node` at `addr` (the same channel).
    pub fn relay_client(
        &self,
        node: Coord,
        addr: &str,
    ) -> Result<NodeRelayClient<Channel>, String> {
        self.channel(node, addr)
            .map(NodeRelayClient::new)
            .map_err(|e| e.to_string())
    }
}

/// For tests of the master that never reach an agent.
#[cfg(test)]
impl Default for AgentPool {
    fn default() -> Self {
        AgentPool::new(
            TlsPem {
                ca: String::new(),
                cert: String::new(),
                key: String::new(),
            },
            Fanout::default(),
        )
    }
}
