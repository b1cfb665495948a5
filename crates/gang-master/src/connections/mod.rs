//! Connection limits of the master's listeners, so that no user can take the master's
//! file descriptors or its attention from the others (`[connections]` in the config):
//!
//! - **Pools.** The client listeners (Unix socket and TCP) share one pool of connections,
//!   the agent port has its own: a flood of clients never locks agents out, nor the
//!   reverse. Both stay below the open-file limit (raised to its hard limit at start) by
//!   `FD_RESERVE` and a descriptor per node, so the master's own files (SQLite, output
//!   logs, its calls to agents) never find the table full.
//! - **Per peer.** On the socket, a user (peer credentials) holds at most `max_per_user`;
//!   on TCP, an address at most `max_per_ip` (`admission::peer_ip`). Root and admins have
//!   no per-user limit on the socket and alone may use the last `admin_reserve` places of
//!   the pool: an admin is answered however many connections users hold.
//! - **Deadlines** (`deadlines.rs`): a connection with no request `handshake_timeout_ms`
//!   after its accept, or none open for `idle_timeout_ms`, is closed; HTTP/2 keepalive
//!   pings find dead peers.
//!
//! A refused connection is accepted and closed at once: the peer sees its connection
//! closed before any answer. Refusals are logged (at most one line per listener every
//! 10 s, with the count since) and counted in `gang_connections_refused_total`.

pub mod accept;
pub mod admission;
pub mod authority;
pub mod call_count;
pub mod deadlines;
pub mod metrics_port;
pub mod trim;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::metrics::{ListenerLabel, Metrics};
use accept::{Admitting, AgentIncoming, TcpIncoming, UnixIncoming};
use admission::{PerPeer, Pool};

pub use accept::raise_fd_limit;
pub use deadlines::{ConnInfo, Deadlines, Peer, StreamCountLayer};

/// Descriptors kept for the master's own files beside the per-node ones: SQLite and its
/// journal, up to 256 idle output logs (`output::MAX_OPEN_LOGS`), the logs being followed,
/// its listeners, and stdio.
pub const FD_RESERVE: u64 = 1024;

#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    pub max_client_connections: Option<usize>,
    pub admin_reserve: Option<usize>,
    pub max_per_user: Option<usize>,
    pub max_per_ip: Option<usize>,
    pub max_agent_connections: Option<usize>,
    pub max_agent_per_ip: Option<usize>,
    pub max_unvetted_agent_connections: Option<usize>,
    pub max_unvetted_agent_per_ip: Option<usize>,
    pub handshake_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub agent_idle_timeout_ms: Option<u64>,
    pub keepalive_interval_ms: Option<u64>,
    pub keepalive_timeout_ms: Option<u64>,
    pub max_attaches_per_user: Option<usize>,
}

/// The limits as configured; 0 for a pool size means "from the open-file limit".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLimits {
    /// Client connections (socket and TCP together); 0: what the descriptors allow.
    pub max_client_connections: usize,
    /// Of those, kept for root and admins on the socket.
    pub admin_reserve: usize,
    /// Connections one user may hold on the socket (admins: no limit).
    pub max_per_user: usize,
    /// Connections one address may hold on the client TCP port.
    pub max_per_ip: usize,
    /// Agent connections; 0: 4 per node and 64.
    pub max_agent_connections: usize,
    /// Connections one address may hold on the agent port; 0: the agent pool (a cluster
    /// on one host has every agent behind one address).
    pub max_agent_per_ip: usize,
    /// Agent-port connections not yet vetted by a node certificate's call, in all and
    /// from one address: past either, a newcomer closes the oldest (`gang_listen`), so
    /// that nobody without a node certificate can keep agents out.
    pub max_unvetted_agent_connections: usize,
    pub max_unvetted_agent_per_ip: usize,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    /// The agent port's idle timeout: a node beating a liveness head, not the master, has
    /// nothing to say to the master between launches; its connection's TLS and HTTP/2
    /// state (some 40 KB) is freed and made again when it next calls.
    pub agent_idle_timeout: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// Attach streams (prun, gangctl output) one user may hold open (admins: no limit).
    pub max_attaches_per_user: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_client_connections: 0,
            // Room for a few admins' sessions and scripts at once.
            admin_reserve: 64,
            // Every attached prun holds a connection: a user may run this many at once
            // from one host; a flood from one user fills 256 places, not the master.
            max_per_user: 256,
            max_per_ip: 256,
            max_agent_connections: 0,
            max_agent_per_ip: 0,
            // An agent's connection is vetted by its first call, milliseconds after its
            // accept; a cluster's agents starting at once from one host stay well under.
            max_unvetted_agent_connections: 1024,
            max_unvetted_agent_per_ip: 256,
            // A TLS handshake on a loaded host takes milliseconds; 10 s leaves room for a
            // slow network and still frees a silent connection soon.
            handshake_timeout: Duration::from_secs(10),
            // A client between calls may reuse its connection for a while; after 5 min
            // with nothing open, it reconnects (its channel does so by itself).
            idle_timeout: Duration::from_secs(300),
            // Longer than any node's idle heartbeat up to 12,288 nodes (5 s a started
            // 1,024 nodes), so only nodes that beat a liveness head go quiet this long.
            agent_idle_timeout: Duration::from_secs(60),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            // An unread stream costs a few 64 KiB pieces: 128 of them, some tens of MB.
            max_attaches_per_user: 128,
        }
    }
}

impl ConnLimits {
    pub fn with(self, f: &ConnectionsSection) -> ConnLimits {
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        ConnLimits {
            max_client_connections: f
                .max_client_connections
                .unwrap_or(self.max_client_connections),
            admin_reserve: f.admin_reserve.unwrap_or(self.admin_reserve),
            max_per_user: f.max_per_user.unwrap_or(self.max_per_user),
            max_per_ip: f.max_per_ip.unwrap_or(self.max_per_ip),
            max_agent_connections: f
                .max_agent_connections
                .unwrap_or(self.max_agent_connections),
            max_agent_per_ip: f.max_agent_per_ip.unwrap_or(self.max_agent_per_ip),
            max_unvetted_agent_connections: f
                .max_unvetted_agent_connections
                .unwrap_or(self.max_unvetted_agent_connections),
            max_unvetted_agent_per_ip: f
                .max_unvetted_agent_per_ip
                .unwrap_or(self.max_unvetted_agent_per_ip),
            handshake_timeout: ms(f.handshake_timeout_ms, self.handshake_timeout),
            idle_timeout: ms(f.idle_timeout_ms, self.idle_timeout),
            agent_idle_timeout: ms(f.agent_idle_timeout_ms, self.agent_idle_timeout),
            keepalive_interval: ms(f.keepalive_interval_ms, self.keepalive_interval),
            keepalive_timeout: ms(f.keepalive_timeout_ms, self.keepalive_timeout),
            max_attaches_per_user: f
                .max_attaches_per_user
                .unwrap_or(self.max_attaches_per_user),
        }
    }

    pub fn deadlines(&self) -> Deadlines {
        Deadlines {
            handshake: self.handshake_timeout,
            idle: self.idle_timeout,
        }
    }

    /// The agent port's: its own idle timeout.
    pub fn agent_deadlines(&self) -> Deadlines {
        Deadlines {
            idle: self.agent_idle_timeout,
            ..self.deadlines()
        }
    }

    /// The pool sizes for `nodes` agents under an open-file limit of `nofile`.
    pub fn plan(&self, nofile: u64, nodes: u64) -> PoolSizes {
        let agents = match self.max_agent_connections {
            0 => (4 * nodes + 64) as usize,
            n => n,
        };
        // The master's own channels to agents (`agents.rs`): one per node while the
        // limit allows, else a quarter of it (least recently used dropped first).
        let agent_channels = nodes.min((nofile / 4).max(256)) as usize;
        let unvetted = self.max_unvetted_agent_connections;
        let fds_left = nofile
            .saturating_sub(FD_RESERVE + agent_channels as u64 + agents as u64 + unvetted as u64)
            as usize;
        // Below this the master serves too few clients to be of use; the warning in
        // `server.rs` says to raise the limit.
        const FLOOR: usize = 128;
        let clients = match self.max_client_connections {
            0 => fds_left.max(FLOOR),
            n => n,
        };
        PoolSizes {
            clients,
            agents,
            agent_channels,
            agent_per_ip: match self.max_agent_per_ip {
                0 => agents,
                n => n,
            },
            fits: clients <= fds_left,
        }
    }
}

/// The admission of a master's three listeners: the client pool (the socket and the TLS
/// port share it), the agent pool and its vetting, their deadlines. A leader's servers and
/// a standby's each have their own: a standby's connections are its own, and are dropped
/// with it at a takeover.
pub struct Listeners {
    client_pool: Arc<Pool>,
    agent_pool: Arc<Pool>,
    vetting: Arc<gang_listen::Vetting>,
    deadlines: Deadlines,
    agent_deadlines: Deadlines,
    metrics: Arc<Metrics>,
    is_admin: Arc<dyn Fn(u32) -> bool + Send + Sync>,
    /// Set on a standby's listeners: cancelled, it ends every connection they admitted.
    closing: Option<CancellationToken>,
}

impl Listeners {
    /// Listeners whose connections all end when `token` is cancelled (each is woken and
    /// fails its next I/O): a standby's, whose connections must not outlive its standing
    /// by, uncounted by the leader's.
    pub fn closed_by(mut self, token: CancellationToken) -> Listeners {
        self.closing = Some(token);
        self
    }

    pub fn new(
        limits: &ConnLimits,
        sizes: PoolSizes,
        metrics: Arc<Metrics>,
        is_admin: Arc<dyn Fn(u32) -> bool + Send + Sync>,
    ) -> Listeners {
        let gauge = |pool: &str| {
            metrics
                .connections_open
                .get_or_create(&ListenerLabel {
                    listener: pool.to_string(),
                })
                .clone()
        };
        let client_pool = Pool::new(
            sizes.clients,
            limits.admin_reserve,
            PerPeer {
                uid: limits.max_per_user,
                ip: limits.max_per_ip,
            },
            gauge("clients"),
        );
        // Every agent-port connection counts here; the unvetted among them are bounded by
        // the vetting (a newcomer closes the oldest), the vetted by `sizes.agents`.
        let agent_pool = Pool::new(
            sizes.agents + limits.max_unvetted_agent_connections,
            0,
            PerPeer {
                uid: 0,
                ip: sizes.agent_per_ip + limits.max_unvetted_agent_connections,
            },
            gauge("agents"),
        );
        let vetting = gang_listen::Vetting::new(gang_listen::VettingLimits {
            per_address: limits.max_unvetted_agent_per_ip,
            total: limits.max_unvetted_agent_connections,
            vetted: sizes.agents,
        });
        Listeners {
            client_pool,
            agent_pool,
            vetting,
            deadlines: limits.deadlines(),
            agent_deadlines: limits.agent_deadlines(),
            metrics,
            is_admin,
            closing: None,
        }
    }

    fn admitting(&self, name: &'static str, pool: &Arc<Pool>, deadlines: Deadlines) -> Admitting {
        let mut a = Admitting::new(name, pool.clone(), deadlines, self.metrics.clone());
        a.closing = self.closing.clone();
        a
    }

    /// The Unix socket's connections.
    pub fn unix(&self, l: tokio::net::UnixListener) -> UnixIncoming {
        let is_admin = self.is_admin.clone();
        UnixIncoming::new(
            l,
            self.admitting("socket", &self.client_pool, self.deadlines),
            Box::new(move |uid| is_admin(uid)),
        )
    }

    /// The client TLS port's connections.
    pub fn clients(&self, l: tokio::net::TcpListener) -> TcpIncoming {
        TcpIncoming::new(l, self.admitting("tcp", &self.client_pool, self.deadlines))
    }

    /// The agent port's connections.
    pub fn agents(&self, l: tokio::net::TcpListener) -> AgentIncoming {
        AgentIncoming::new(
            l,
            self.admitting("agents", &self.agent_pool, self.agent_deadlines),
            self.vetting.clone(),
        )
    }
}

/// What `ConnLimits::plan` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSizes {
    pub clients: usize,
    pub agents: usize,
    /// The master's channels to agents kept at most.
    pub agent_channels: usize,
    pub agent_per_ip: usize,
    /// Whether the pools fit under the open-file limit with the reserve.
    pub fits: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_stay_under_the_descriptor_limit_with_the_reserve() {
        let l = ConnLimits::default();
        let p = l.plan(20_000, 16);
        assert_eq!(p.agents, 128);
        assert_eq!(p.agent_per_ip, 128);
        assert_eq!(p.clients, 20_000 - 1024 - 16 - 128 - 1024);
        assert!(p.fits);
        // A limit too small for anything: a floor, and it says it does not fit.
        let p = l.plan(1024, 16);
        assert_eq!(p.clients, 128);
        assert!(!p.fits);
        let set = ConnLimits {
            max_client_connections: 500,
            max_agent_per_ip: 8,
            ..l
        };
        let p = set.plan(20_000, 16);
        assert_eq!((p.clients, p.agent_per_ip, p.fits), (500, 8, true));
        // Past the limit's quarter the master keeps fewer channels to agents than nodes.
        assert_eq!(l.plan(20_000, 16).agent_channels, 16);
        assert_eq!(l.plan(20_000, 10_000).agent_channels, 5_000);
    }
}
