//! One signed order as a forwarder holds it, and the time a subtree of it may take.
//!
//! The bound of a subtree of depth d ([`fanout::depth`]) is `hop × (2^d − 1)`: its head
//! may wait out one dead head below it and route around it (twice the bound of depth
//! d − 1) and still answer within its own, so one dead agent on a path costs only its own
//! subtree, never its parent's.

use std::time::Duration;

use super::fanout;

/// One signed order and where its nodes listen, as a forwarder holds it.
#[derive(Debug, Clone)]
pub struct Route {
    pub order: Vec<u8>,
    pub signature: Vec<u8>,
    /// Every node of the order, unpacked (shared: an emulating process's nodes hold one).
    pub nodes: std::sync::Arc<[(u32, u32)]>,
    /// Where `nodes[base..]` listen (the forwarder knows no more than its own range).
    pub base: usize,
    pub addresses: Vec<String>,
    pub width: u32,
    pub hop_timeout_ms: u32,
    /// Who forwards (for messages): "the master", "node (3,1)".
    pub from: String,
}

impl Route {
    /// How long a subtree of `n` nodes may take to answer.
    pub fn bound(&self, n: usize) -> Duration {
        subtree_bound(n, self.width, self.hop_timeout_ms)
    }
}

/// How long a subtree of `n` nodes, `width` children a node, may take to answer when one
/// hop may take `hop_timeout_ms`. The depth is capped at 20 so the shift cannot overflow.
pub fn subtree_bound(n: usize, width: u32, hop_timeout_ms: u32) -> Duration {
    let depth = fanout::depth(n, width as usize).min(20);
    Duration::from_millis(u64::from(hop_timeout_ms)) * ((1u32 << depth) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_bound_doubles_with_each_level_plus_one_hop() {
        assert_eq!(subtree_bound(1, 4, 100), Duration::from_millis(100));
        let d = fanout::depth(50, 4);
        assert_eq!(
            subtree_bound(50, 4, 100),
            Duration::from_millis(100) * ((1u32 << d) - 1)
        );
        assert!(subtree_bound(50, 4, 100) > subtree_bound(5, 4, 100));
    }
}
