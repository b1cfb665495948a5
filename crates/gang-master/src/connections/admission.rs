//! Who may open one more connection: a count per pool (the client listeners share one,
//! the agent port has its own) and per peer (a Unix user, a remote address). Pure
//! counting, no I/O: the accept loops (`accept.rs`) ask, and a `Permit` held by the
//! connection gives its place back when the connection is dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;

/// Who a connection counts against.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PeerKey {
    /// A local user, by the uid of the socket's peer credentials.
    Uid(u32),
    /// A remote address (see `peer_ip`).
    Ip(IpAddr),
}

/// The address a TCP peer is counted by. All of 127.0.0.0/8 is one peer (any local user
/// may send from any address in it: counted apart, a local attacker would have 16
/// million), and IPv6 peers count by their /64 (the block one host is usually given).
pub fn peer_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => peer_ip(IpAddr::V4(v4)),
            None if v6.is_loopback() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Why a connection was refused (a metric label and a log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The peer holds its limit already.
    PeerLimit,
    /// The pool is full (for this peer: non-admins leave the admins' reserve free).
    PoolFull,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PeerLimit => "peer_limit",
            Refusal::PoolFull => "pool_full",
        }
    }
}

/// One pool of connections and its limits.
#[derive(Debug)]
pub struct Pool {
    /// Connections the pool holds at most.
    pub max: usize,
    /// Of those, kept for privileged peers (root and admins on the socket).
    pub reserve: usize,
    /// Connections one unprivileged peer may hold.
    pub per_peer: PerPeer,
    counts: Mutex<Counts>,
    /// Connections open now, for the metrics.
    gauge: Gauge,
}

/// Connections one unprivileged peer may hold, by kind of peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerPeer {
    pub uid: usize,
    pub ip: usize,
}

impl PerPeer {
    fn of(&self, key: PeerKey) -> usize {
        match key {
            PeerKey::Uid(_) => self.uid,
            PeerKey::Ip(_) => self.ip,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_peer: HashMap<PeerKey, usize>,
}

/// A connection's place in its pool, given back on drop.
#[derive(Debug)]
pub struct Permit {
    pool: Arc<Pool>,
    key: PeerKey,
}

impl Pool {
    pub fn new(max: usize, reserve: usize, per_peer: PerPeer, gauge: Gauge) -> Arc<Pool> {
        Arc::new(Pool {
            max,
            reserve: reserve.min(max),
            per_peer,
            counts: Mutex::default(),
            gauge,
        })
    }

    /// A place for a connection of `key`; `privileged` peers have no per-peer limit and
    /// may use the reserve.
    pub fn admit(self: &Arc<Self>, key: PeerKey, privileged: bool) -> Result<Permit, Refusal> {
        let mut c = self.counts.lock().expect("pool lock");
        let held = c.per_peer.get(&key).copied().unwrap_or(0);
        let room = if privileged {
            self.max
        } else {
            self.max - self.reserve
        };
        if c.total >= room {
            return Err(Refusal::PoolFull);
        }
        if !privileged && held >= self.per_peer.of(key) {
            return Err(Refusal::PeerLimit);
        }
        c.total += 1;
        self.gauge.inc();
        c.per_peer.insert(key, held + 1);
        Ok(Permit {
            pool: self.clone(),
            key,
        })
    }

    /// Whether `key` would be refused now as an unprivileged peer: only then is it worth
    /// finding out whether it is privileged (a user lookup).
    pub fn would_refuse(&self, key: PeerKey) -> bool {
        let c = self.counts.lock().expect("pool lock");
        c.total >= self.max - self.reserve
            || c.per_peer.get(&key).copied().unwrap_or(0) >= self.per_peer.of(key)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().expect("pool lock").total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.pool.counts.lock().expect("pool lock");
        c.total -= 1;
        self.pool.gauge.dec();
        if let Some(n) = c.per_peer.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                c.per_peer.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_share_and_the_reserve_is_left_to_the_privileged() {
        let gauge = Gauge::default();
        let per_peer = PerPeer { uid: 4, ip: 4 };
        let pool = Pool::new(10, 3, per_peer, gauge.clone());
        let user = PeerKey::Uid(1000);
        let mine: Vec<_> = (0..4).map(|_| pool.admit(user, false).unwrap()).collect();
        assert_eq!(pool.admit(user, false).unwrap_err(), Refusal::PeerLimit);
        assert!(pool.would_refuse(user));
        let other: Vec<_> = (0..3)
            .map(|_| pool.admit(PeerKey::Uid(1001), false).unwrap())
            .collect();
        // 7 of 10 used: the last 3 are root's.
        assert_eq!(
            pool.admit(PeerKey::Uid(1002), false).unwrap_err(),
            Refusal::PoolFull
        );
        let root: Vec<_> = (0..3)
            .map(|_| pool.admit(PeerKey::Uid(0), true).unwrap())
            .collect();
        assert_eq!(
            pool.admit(PeerKey::Uid(0), true).unwrap_err(),
            Refusal::PoolFull
        );
        assert_eq!(gauge.get(), 10);
        drop((mine, root));
        assert_eq!((pool.open(), gauge.get()), (3, 3));
        assert!(!pool.would_refuse(user));
        pool.admit(user, false).unwrap();
        drop(other);
    }

    #[test]
    fn loopback_is_one_peer_and_ipv6_counts_by_its_64() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        for other in ["127.9.8.7", "::1", "::ffff:127.0.0.2"] {
            assert_eq!(peer_ip(other.parse().unwrap()), a, "{other}");
        }
        assert_eq!(
            peer_ip("2001:db8:1:2:aaaa::1".parse().unwrap()),
            peer_ip("2001:db8:1:2:bbbb::9".parse().unwrap())
        );
        assert_ne!(
            peer_ip("10.0.0.1".parse().unwrap()),
            peer_ip("10.0.0.2".parse().unwrap())
        );
    }
}
