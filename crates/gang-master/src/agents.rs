//! Clients of the node agents, one channel per agent address, made on first use.

use std::collections::HashMap;
use std::sync::Mutex;

use gang_proto::v1::node_agent_client::NodeAgentClient;
use tonic::transport::{Channel, Endpoint};

#[derive(Default)]
pub struct AgentPool {
    clients: Mutex<HashMap<String, NodeAgentClient<Channel>>>,
}

pub fn endpoint(addr: &str) -> Result<Endpoint, tonic::transport::Error> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(uri)?
        .connect_timeout(std::time::Duration::from_secs(2))
        .tcp_nodelay(true))
}

impl AgentPool {
    /// A client for the agent at `addr` (the channel connects lazily and reconnects).
    pub fn client(&self, addr: &str) -> Result<NodeAgentClient<Channel>, tonic::transport::Error> {
        let mut clients = self.clients.lock().expect("agent pool lock");
        if let Some(c) = clients.get(addr) {
            return Ok(c.clone());
        }
        let c = NodeAgentClient::new(endpoint(addr)?.connect_lazy());
        clients.insert(addr.to_string(), c.clone());
        Ok(c)
    }
}
