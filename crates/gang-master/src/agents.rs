//! Clients of the node agents, one channel per (node, address), made on first use. Every
//! channel is mutual TLS: the master's certificate is its identity, and the agent must
//! prove it is the node the master means (its certificate names `node-X-Y.gang`), whatever
//! address it registered.
//!
//! Channels are kept while used: one idle for [`CHANNEL_IDLE`] is dropped (its connection
//! closes once no call holds it), and no more than `max_channels` are kept, the least
//! recently used going first. Each is a descriptor: with the order tree the master calls
//! a few heads of each order, but a table sent to each agent as it registers would
//! otherwise keep a connection to every node for good (10,000 nodes: 10,000 descriptors
//! besides the agents' own connections).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gang_auth::names::node_dns;
use gang_auth::order_key::OrderSigner;
use gang_auth::pki::TlsPem;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::node_relay_client::NodeRelayClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::Fanout;
use crate::state::views::Coord;

/// A channel unused this long is dropped.
pub const CHANNEL_IDLE: Duration = Duration::from_secs(60);

pub struct AgentPool {
    tls: TlsPem,
    channels: Mutex<Channels>,
    /// Signs orders relayed through agents (its public half goes out at registration).
    pub signer: OrderSigner,
    pub fanout: Fanout,
    /// How far each launch down the tree has got (`prun -v`).
    pub progress: crate::actor::progress::LaunchProgress,
}

impl AgentPool {
    pub fn new(tls: TlsPem, fanout: Fanout) -> Self {
        AgentPool {
            signer: OrderSigner::from_master_key(tls.key.as_bytes()),
            tls,
            channels: Mutex::new(Channels::new(usize::MAX)),
            fanout,
            progress: Default::default(),
        }
    }

    /// Keep at most `n` channels (at least 1).
    pub fn with_max_channels(self, n: usize) -> Self {
        self.channels.lock().expect("agent pool lock").max = n.max(1);
        self
    }

    /// Drop the channels idle for [`CHANNEL_IDLE`] (a master that sends nothing new
    /// would otherwise keep the channel of every node that registered: 10,000 nodes,
    /// 10,000 connections and their buffers).
    pub fn sweep_idle(&self) {
        self.channels
            .lock()
            .expect("agent pool lock")
            .sweep(Instant::now());
    }

    /// Channels kept now.
    pub fn channels_kept(&self) -> usize {
        self.channels.lock().expect("agent pool lock").map.len()
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
        let now = Instant::now();
        if let Some(c) = channels.get(&key, now) {
            return Ok(c);
        }
        let c = self.endpoint(node, addr)?.connect_lazy();
        channels.insert(key, c.clone(), now);
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

type Key = (Coord, String);

/// The kept channels with when each was last used.
struct Channels<C = Channel> {
    map: HashMap<Key, (C, Instant)>,
    max: usize,
    /// When idle channels were last dropped.
    swept: Instant,
}

impl<C: Clone> Channels<C> {
    fn new(max: usize) -> Self {
        Channels {
            map: HashMap::new(),
            max,
            swept: Instant::now(),
        }
    }

    fn get(&mut self, key: &Key, now: Instant) -> Option<C> {
        let (c, used) = self.map.get_mut(key)?;
        *used = now;
        Some(c.clone())
    }

    /// Drop the channels idle for [`CHANNEL_IDLE`].
    fn sweep(&mut self, now: Instant) {
        self.swept = now;
        self.map
            .retain(|_, (_, used)| now.duration_since(*used) < CHANNEL_IDLE);
    }

    fn insert(&mut self, key: Key, c: C, now: Instant) {
        // Sweeping costs a pass over the map: here at most once per idle period.
        if now.duration_since(self.swept) >= CHANNEL_IDLE {
            self.sweep(now);
        }
        if self.map.len() >= self.max {
            // Rare (a flat order to more nodes than the cap): a pass to find the oldest.
            if let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.map.remove(&oldest);
            }
        }
        self.map.insert(key, (c, now));
    }
}

/// Sweep `pool`'s idle channels every half idle period, until the pool is dropped, and
/// give back the memory they and connections closed since held (`connections::trim`).
pub async fn sweep_idle_channels(pool: std::sync::Weak<AgentPool>) {
    loop {
        tokio::time::sleep(CHANNEL_IDLE / 2).await;
        let Some(p) = pool.upgrade() else { return };
        p.sweep_idle();
        drop(p);
        crate::connections::trim::give_back_freed();
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

#[cfg(test)]
mod channel_tests {
    use super::*;

    #[test]
    fn channels_go_when_idle_or_least_recently_used_past_the_cap() {
        let key = |x: u32| ((x, 0), format!("h:{x}"));
        let t0 = Instant::now();
        let mut c: Channels<u32> = Channels::new(2);
        c.swept = t0;
        c.insert(key(1), 1, t0);
        c.insert(key(2), 2, t0 + Duration::from_secs(1));
        // 1 is used again: 2 is now the least recently used, and goes for 3.
        assert_eq!(c.get(&key(1), t0 + Duration::from_secs(2)), Some(1));
        c.insert(key(3), 3, t0 + Duration::from_secs(3));
        assert_eq!(c.get(&key(2), t0 + Duration::from_secs(3)), None);
        assert_eq!(c.map.len(), 2);
        // A minute later only what was used within the idle period stays.
        let later = t0 + Duration::from_secs(3) + CHANNEL_IDLE;
        assert_eq!(c.get(&key(3), later - Duration::from_secs(1)), Some(3));
        c.insert(key(4), 4, later);
        let mut kept: Vec<u32> = c.map.values().map(|(v, _)| *v).collect();
        kept.sort();
        assert_eq!(kept, [3, 4]);
        // With nothing new sent, a sweep alone drops the idle ones.
        c.sweep(later + CHANNEL_IDLE);
        assert!(c.map.is_empty());
    }
}
