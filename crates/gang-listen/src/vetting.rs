//! The count of unvetted and vetted connections, and who is evicted for a newcomer.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VettingLimits {
    /// Unvetted connections from one address.
    pub per_address: usize,
    /// Unvetted connections in all.
    pub total: usize,
    /// Vetted connections in all.
    pub vetted: usize,
}

/// The address a peer is counted by: all of 127.0.0.0/8 (and ::1) is one (any local user
/// may send from any address in it), an IPv6 peer counts by its /64.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => address_key(IpAddr::V4(v4)),
            None if v6.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Whether a connection was evicted, and the task to wake when it is (a silent peer's
/// connection waits in a read that nothing else would end).
#[derive(Debug, Default)]
pub(crate) struct Flag {
    evicted: AtomicBool,
    /// Its peer sent something (a TLS hello): it is not merely held open.
    spoke: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Flag {
    fn raise(&self) {
        self.evicted.store(true, Ordering::Release);
        let w = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = w {
            w.wake();
        }
    }

    pub(crate) fn raised(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    pub(crate) fn spoke(&self) {
        self.spoke.store(true, Ordering::Relaxed);
    }

    fn has_spoken(&self) -> bool {
        self.spoke.load(Ordering::Relaxed)
    }

    /// Wake `w` when raised.
    pub(crate) fn wake_on_raise(&self, w: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        if !slot.as_ref().is_some_and(|s| s.will_wake(w)) {
            *slot = Some(w.clone());
        }
    }
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Unvetted connections by arrival (the key orders them), and their address.
    unvetted: BTreeMap<u64, (IpAddr, Arc<Flag>, SocketAddr)>,
    per_address: HashMap<IpAddr, usize>,
    /// Connections by their peer's address and port: how a request finds its ticket.
    by_peer: HashMap<SocketAddr, u64>,
    vetted: usize,
}

/// One listener's admission.
#[derive(Debug)]
pub struct Vetting {
    limits: VettingLimits,
    state: Mutex<State>,
}

/// A connection's place: dropped when the connection is.
#[derive(Debug)]
pub struct Ticket {
    vetting: Arc<Vetting>,
    id: u64,
    peer: SocketAddr,
    evicted: Arc<Flag>,
}

impl Vetting {
    pub fn new(limits: VettingLimits) -> Arc<Vetting> {
        Arc::new(Vetting {
            limits,
            state: Mutex::default(),
        })
    }

    pub fn limits(&self) -> VettingLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection from `peer` was accepted: its ticket, after evicting the oldest
    /// unvetted connections that would put it over a bound.
    pub fn enter(self: &Arc<Self>, peer: SocketAddr) -> Ticket {
        let key = address_key(peer.ip());
        let mut s = self.lock();
        // Its address's first, then of all: the oldest that never spoke (held open
        // only), else the oldest.
        while s.per_address.get(&key).copied().unwrap_or(0) >= self.limits.per_address.max(1) {
            match victim(&s, Some(key)) {
                Some(id) => evict(&mut s, id),
                None => break,
            }
        }
        while s.unvetted.len() >= self.limits.total.max(1) {
            match victim(&s, None) {
                Some(id) => evict(&mut s, id),
                None => break,
            }
        }
        let id = s.next;
        s.next += 1;
        let evicted = Arc::new(Flag::default());
        s.unvetted.insert(id, (key, evicted.clone(), peer));
        *s.per_address.entry(key).or_default() += 1;
        s.by_peer.insert(peer, id);
        Ticket {
            vetting: self.clone(),
            id,
            peer,
            evicted,
        }
    }

    /// The connection from `peer` showed a certificate the listener serves: it leaves the
    /// unvetted bounds. False if it was evicted meanwhile, or vetted connections are at
    /// their bound (the caller closes it then). Vetting a vetted one again is a no-op.
    pub fn vet(&self, peer: SocketAddr) -> bool {
        let mut s = self.lock();
        let Some(&id) = s.by_peer.get(&peer) else {
            return false;
        };
        let Some((key, evicted, _)) = s.unvetted.get(&id).cloned() else {
            // Vetted already (an evicted one left `by_peer` when it was evicted).
            return true;
        };
        if evicted.raised() || s.vetted >= self.limits.vetted {
            return false;
        }
        s.unvetted.remove(&id);
        decrement(&mut s.per_address, key);
        s.vetted += 1;
        true
    }

    /// Whether the connection from `peer` was vetted.
    pub fn is_vetted(&self, peer: SocketAddr) -> bool {
        let s = self.lock();
        s.by_peer
            .get(&peer)
            .is_some_and(|id| !s.unvetted.contains_key(id))
    }

    /// (unvetted, vetted) connections now.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.unvetted.len(), s.vetted)
    }
}

fn decrement(m: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = m.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            m.remove(&key);
        }
    }
}

/// Which unvetted connection a newcomer closes (of address `key`, or of all): the oldest
/// whose peer never sent a byte, else the oldest.
fn victim(s: &State, key: Option<IpAddr>) -> Option<u64> {
    let mut of_key = s
        .unvetted
        .iter()
        .filter(|(_, (k, _, _))| key.is_none_or(|key| *k == key));
    let mut oldest = None;
    for (id, (_, flag, _)) in of_key.by_ref() {
        if !flag.has_spoken() {
            return Some(*id);
        }
        oldest.get_or_insert(*id);
    }
    oldest
}

fn evict(s: &mut State, id: u64) {
    if let Some((key, flag, peer)) = s.unvetted.remove(&id) {
        flag.raise();
        decrement(&mut s.per_address, key);
        if s.by_peer.get(&peer) == Some(&id) {
            s.by_peer.remove(&peer);
        }
    }
}

impl Ticket {
    /// Whether a newcomer took this connection's place: it must close.
    pub fn evicted(&self) -> bool {
        self.evicted.raised()
    }

    pub(crate) fn flag(&self) -> &Flag {
        &self.evicted
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.vetting.lock();
        if s.by_peer.get(&self.peer) == Some(&self.id) {
            s.by_peer.remove(&self.peer);
        }
        match s.unvetted.remove(&self.id) {
            Some((key, _, _)) => decrement(&mut s.per_address, key),
            None if !self.evicted() => s.vetted -= 1,
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ip: &str, port: u16) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), port)
    }

    fn limits() -> VettingLimits {
        VettingLimits {
            per_address: 3,
            total: 5,
            vetted: 2,
        }
    }

    #[test]
    fn a_flood_from_one_address_evicts_its_own_oldest_and_never_a_vetted_one() {
        let v = Vetting::new(limits());
        let agent = v.enter(at("127.0.0.1", 1));
        assert!(v.vet(agent.peer()));
        let flood: Vec<Ticket> = (10..20).map(|p| v.enter(at("127.0.0.2", p))).collect();
        // Loopback is one address: 3 unvetted at most; the 7 oldest evicted.
        assert_eq!(flood.iter().filter(|t| t.evicted()).count(), 7);
        assert!(flood[7..].iter().all(|t| !t.evicted()));
        assert!(!agent.evicted(), "a vetted connection is never evicted");
        assert_eq!(v.counts(), (3, 1));
        // A newcomer from loopback (another agent): the flood's oldest goes, it stays.
        let late = v.enter(at("127.0.0.1", 2));
        assert!(flood[7].evicted() && !late.evicted());
        assert!(v.vet(late.peer()));
        // Vetted connections at their bound: the next is not vetted.
        let third = v.enter(at("10.0.0.9", 3));
        assert!(!v.vet(third.peer()));
        drop((agent, late, third, flood));
        assert_eq!(v.counts(), (0, 0));
    }

    /// A peer that speaks (its TLS hello is on its way) outlives silent ones however new
    /// it is: a flood of connections held open never evicts an agent mid-handshake.
    #[test]
    fn silent_connections_go_before_ones_whose_peer_spoke() {
        let v = Vetting::new(limits());
        let agent = v.enter(at("127.0.0.1", 1));
        agent.flag().spoke();
        let flood: Vec<Ticket> = (10..30).map(|p| v.enter(at("127.0.0.1", p))).collect();
        assert!(!agent.evicted(), "spoke: kept while silent ones can go");
        assert_eq!(flood.iter().filter(|t| !t.evicted()).count(), 2);
        assert!(v.vet(agent.peer()));
    }

    #[test]
    fn the_total_bound_evicts_the_oldest_of_all_and_an_evicted_one_is_not_vetted() {
        let v = Vetting::new(limits());
        let first: Vec<Ticket> = (1..=5)
            .map(|i| v.enter(at(&format!("10.0.0.{i}"), 1)))
            .collect();
        let new = v.enter(at("10.0.0.9", 1));
        assert!(first[0].evicted() && !first[1].evicted() && !new.evicted());
        assert!(!v.vet(first[0].peer()), "evicted: not vetted");
        assert!(!v.is_vetted(first[0].peer()));
        assert_eq!(v.counts(), (5, 0));
        drop(first);
        assert_eq!(v.counts(), (1, 0));
    }
}
