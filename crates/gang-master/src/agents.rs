//! Clients of the node agents, one channel per (node, address), made on first use. Every
//! channel is mutual TLS: the master's certificate is its identity, and the agent must
//! prove it is the node the master means (its certificate names `node-X-Y.gang`), whatever
//! address it registered.

use std::collections::HashMap;
use std::sync::Mutex;

use gang_auth::names::node_dns;
use gang_auth::pki::TlsPem;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::state::views::Coord;

pub struct AgentPool {
    tls: TlsPem,
    clients: Mutex<HashMap<(Coord, String), NodeAgentClient<Channel>>>,
}

impl AgentPool {
    pub fn new(tls: TlsPem) -> Self {
        AgentPool {
            tls,
            clients: Mutex::new(HashMap::new()),
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

    /// A client for the agent of `node` at `addr` (connects lazily, reconnects).
    pub fn client(
        &self,
        node: Coord,
        addr: &str,
    ) -> Result<NodeAgentClient<Channel>, tonic::transport::Error> {
        let mut clients = self.clients.lock().expect("agent pool lock");
        let key = (node, addr.to_string());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let c = NodeAgentClient::new(self.endpoint(node, addr)?.connect_lazy());
        clients.insert(key, c.clone());
        Ok(c)
    }
}

/// For tests of the master that never reach an agent.
#[cfg(test)]
impl Default for AgentPool {
    fn default() -> Self {
        AgentPool::new(TlsPem {
            ca: String::new(),
            cert: String::new(),
            key: String::new(),
        })
    }
}
