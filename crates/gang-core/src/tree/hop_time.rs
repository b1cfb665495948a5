//! How long a subtree of the order tree is waited for, from what its hops measured: each
//! forwarder keeps the time its answered subtrees took per node (an exponentially
//! weighted average), and a subtree of `n` nodes is given at least `MARGIN` times that
//! per-node time `n` times over, besides the configured bound (`route::subtree_bound`),
//! which stays the floor. A host whose launches grew slow (a loaded machine: 10,000
//! emulated agents on two cores) so lengthens its own bounds instead of routing around
//! live agents.
//!
//! The bound only says when to ask; a head is reported unreachable only if it does not
//! answer an `Alive` call either (`gang_proto::relay`), and no later than [`CEILING`].

use std::time::Duration;

/// How far past the measured time a subtree may run before its head is asked.
pub const MARGIN: u32 = 4;
/// The weight of the newest sample.
const WEIGHT: f64 = 0.25;
/// No subtree is waited for longer than this in all (the largest configurable hop bound).
pub const CEILING: Duration = Duration::from_secs(600);

/// Per-node time of the subtrees this forwarder's calls answered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HopTime {
    per_node_s: Option<f64>,
}

impl HopTime {
    pub const fn new() -> Self {
        HopTime { per_node_s: None }
    }

    /// A subtree of `n` nodes answered after `took`.
    pub fn record(&mut self, n: usize, took: Duration) {
        let sample = took.as_secs_f64() / n.max(1) as f64;
        self.per_node_s = Some(match self.per_node_s {
            None => sample,
            Some(avg) => avg + WEIGHT * (sample - avg),
        });
    }

    /// The bound for a subtree of `n` nodes whose configured bound is `floor`.
    pub fn bound(&self, n: usize, floor: Duration) -> Duration {
        let measured = self.per_node_s.map_or(Duration::ZERO, |s| {
            Duration::from_secs_f64((s * n as f64 * f64::from(MARGIN)).min(CEILING.as_secs_f64()))
        });
        floor.max(measured).min(CEILING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_secs(20);

    #[test]
    fn with_nothing_measured_the_configured_bound_holds() {
        assert_eq!(HopTime::default().bound(625, FLOOR), FLOOR);
    }

    #[test]
    fn slow_subtrees_lengthen_the_bound_with_their_size() {
        let mut h = HopTime::default();
        // 625 nodes answered in 50 s: 80 ms a node.
        h.record(625, Duration::from_secs(50));
        assert_eq!(h.bound(625, FLOOR), Duration::from_secs(200));
        assert_eq!(h.bound(1, FLOOR), FLOOR, "a leaf keeps the floor");
        assert!(h.bound(5_000, FLOOR) <= CEILING);
        assert_eq!(h.bound(100_000, FLOOR), CEILING);
    }

    #[test]
    fn the_average_follows_the_newest_samples() {
        let mut h = HopTime::default();
        h.record(100, Duration::from_secs(10));
        for _ in 0..40 {
            h.record(100, Duration::from_millis(100));
        }
        // Back to 1 ms a node: the floor rules again.
        assert_eq!(h.bound(100, FLOOR), FLOOR);
    }
}
