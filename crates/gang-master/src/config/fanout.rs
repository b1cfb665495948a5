//! How launches, signals and slice tables reach many agents: the width of the order tree,
//! its per-level timeout, and where a job's fences are gathered.

/// The order tree: the master calls at most `width` agents for one order, each of which
/// forwards to at most `width` more (`gang_core::tree::fanout`); 0 calls every agent itself.
/// An order for at most `width` nodes goes flat either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    pub width: u32,
    /// How long one level of the tree may take to answer before its head is routed
    /// around (a subtree of L levels: 2^L − 1 times this, so that its head can route
    /// around one dead agent below it in time: `gang_proto::relay`).
    pub hop_timeout_ms: u32,
    /// Whether a job's fences are gathered among its agents, over the same tree (`fences
    /// = "agents"`, the default), or go to the master (`"master"`). Among the agents the
    /// master hears one record a fence, whatever the job's size.
    pub fences_among_agents: bool,
}

/// Chosen from `benches/emulated_fleet` (README, "Emulated fleets"): see there.
pub const DEFAULT_FANOUT_WIDTH: u32 = 16;
/// Above the longest a node's own part may take: a rank's launch waits up to 15 s for the
/// node's PMIx server (`gang-pmix`), and 256 emulated nodes of a debug build on 2 cores
/// took over 5 s to answer a leaf's relay. A dead agent (refused or unroutable
/// connection) is routed around after the 2 s connect timeout, whatever this is.
pub const DEFAULT_HOP_TIMEOUT_MS: u32 = 20_000;

impl Default for Fanout {
    fn default() -> Self {
        Fanout {
            width: DEFAULT_FANOUT_WIDTH,
            hop_timeout_ms: DEFAULT_HOP_TIMEOUT_MS,
            fences_among_agents: true,
        }
    }
}

impl Fanout {
    /// The settings, or why they do not hold (naming the key and its limits).
    pub fn check(self) -> Result<Fanout, String> {
        if self.width == 1 || self.width > 256 {
            return Err(format!(
                "fanout_width = {}: expected 0 (the master calls every agent) or 2 to 256",
                self.width
            ));
        }
        if !(100..=600_000).contains(&self.hop_timeout_ms) {
            return Err(format!(
                "relay_hop_timeout_ms = {}: expected 100 to 600000",
                self.hop_timeout_ms
            ));
        }
        Ok(self)
    }

    /// Whether an order for `nodes` agents goes through the tree.
    pub fn relays(self, nodes: usize) -> bool {
        self.width > 0 && nodes > self.width as usize
    }

    /// The width of a job's fence tree (0: fences at the master).
    pub fn fence_width(self) -> u32 {
        if self.fences_among_agents {
            self.width
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fanout_width_is_flat_or_two_to_256() {
        let f = |width, hop_timeout_ms| Fanout {
            width,
            hop_timeout_ms,
            fences_among_agents: true,
        };
        assert!(f(0, 5000).check().is_ok());
        assert!(f(2, 100).check().is_ok());
        assert!(f(256, 600_000).check().is_ok());
        assert!(f(1, 5000).check().unwrap_err().contains("fanout_width = 1"));
        assert!(f(257, 5000).check().unwrap_err().contains("2 to 256"));
        assert!(
            f(16, 99)
                .check()
                .unwrap_err()
                .contains("relay_hop_timeout_ms = 99")
        );
        assert!(!f(0, 5000).relays(10_000));
        assert!(!f(16, 5000).relays(16));
        assert!(f(16, 5000).relays(17));
        assert_eq!(f(16, 5000).fence_width(), 16);
        assert_eq!(
            Fanout::default().fence_width(),
            DEFAULT_FANOUT_WIDTH,
            "fences among the agents by default"
        );
    }
}
