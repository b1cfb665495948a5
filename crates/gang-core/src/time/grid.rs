//! The slot grid: slot `k` covers `[epoch + k*q, epoch + (k+1)*q)` on the master clock.
//!
//! Every slice table of one master run shares one grid, so a new table never shifts the
//! boundaries agents already sleep to. The master (publishing tables), the agent (its switch
//! thread) and `gangctl slices --watch` (marking the running slice) all reason about
//! instants through this one type.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotGrid {
    /// Start of slot 0, in master-clock nanoseconds.
    pub epoch_ns: i64,
    /// Length of a slot; always positive.
    pub quantum_ns: i64,
}

impl SlotGrid {
    /// # Panics
    /// If `quantum_ns` is not positive (a grid without slots is a programming error; inputs
    /// from the network are validated before they become grids).
    pub fn new(epoch_ns: i64, quantum_ns: i64) -> Self {
        assert!(
            quantum_ns > 0,
            "a quantum must be positive, got {quantum_ns}"
        );
        SlotGrid {
            epoch_ns,
            quantum_ns,
        }
    }

    /// The grid whose slot 0 starts at the first whole multiple of `quantum_ns` at or after
    /// `t_ns` (a fresh grid, aligned to the quantum so boundaries are round numbers).
    pub fn starting_at_or_after(t_ns: i64, quantum_ns: i64) -> Self {
        let unit = SlotGrid::new(0, quantum_ns);
        SlotGrid::new(unit.boundary_at_or_after(t_ns), quantum_ns)
    }

    /// The slot containing `t_ns` (negative before the epoch).
    ///
    /// Grids come from the network (an agent's slice tables), so the arithmetic here and
    /// below never overflows: it is exact wherever the times are (within ±146 years of
    /// each other, at any quantum), and saturates at the ends of `i64` beyond.
    pub fn slot_at(&self, t_ns: i64) -> i64 {
        let k =
            (i128::from(t_ns) - i128::from(self.epoch_ns)).div_euclid(i128::from(self.quantum_ns));
        k.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Where slot `k` starts.
    pub fn slot_start(&self, k: i64) -> i64 {
        let t = i128::from(self.epoch_ns) + i128::from(k) * i128::from(self.quantum_ns);
        t.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The first boundary at or after `t_ns` (`t_ns` itself if it is one).
    pub fn boundary_at_or_after(&self, t_ns: i64) -> i64 {
        let b = self.slot_start(self.slot_at(t_ns));
        if b == t_ns {
            b
        } else {
            b.saturating_add(self.quantum_ns)
        }
    }

    /// The first boundary strictly after `t_ns` (`i64::MAX` if there is none before).
    pub fn boundary_after(&self, t_ns: i64) -> i64 {
        self.slot_start(self.slot_at(t_ns).saturating_add(1))
    }

    /// The row of `rows` running at `t_ns` (slot k runs row k mod rows): `None` before the
    /// epoch or without rows.
    pub fn row_at(&self, t_ns: i64, rows: usize) -> Option<usize> {
        let k = self.slot_at(t_ns);
        (k >= 0 && rows > 0).then(|| (k as u64 % rows as u64) as usize)
    }

    /// When a change published at `now_ns` can take effect: the first boundary at least
    /// `lead_ns` ahead (the time every agent needs to receive it), never before the epoch.
    pub fn effective_from(&self, now_ns: i64, lead_ns: i64) -> i64 {
        self.boundary_at_or_after(now_ns.saturating_add(lead_ns.max(0)).max(self.epoch_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice table's grid at the ends of `i64` (fuzz target `proto_node_table`): the
    /// arithmetic overflowed, a panic of the agent's SetTable handler in debug builds.
    #[test]
    fn grids_at_the_ends_of_time_saturate() {
        let g = SlotGrid::new(-1, i64::MAX);
        assert_eq!(g.slot_at(i64::MIN), -1);
        assert_eq!(g.boundary_after(i64::MAX), i64::MAX);
        let g = SlotGrid::new(i64::MIN, 100_000_000);
        assert_eq!(g.boundary_after(i64::MAX), i64::MAX);
        assert_eq!(g.boundary_at_or_after(i64::MIN), i64::MIN);
        let b = g.slot_start(g.slot_at(0));
        assert!(b <= 0 && b > -100_000_000, "{b}");
        assert_eq!(g.effective_from(i64::MAX, i64::MAX), i64::MAX);
    }

    #[test]
    fn slots_and_boundaries() {
        let g = SlotGrid::new(1000, 10);
        assert_eq!(g.slot_at(999), -1);
        assert_eq!(g.slot_at(1000), 0);
        assert_eq!(g.slot_at(1009), 0);
        assert_eq!(g.slot_at(1010), 1);
        assert_eq!(g.slot_start(-1), 990);
        assert_eq!(g.boundary_at_or_after(1000), 1000);
        assert_eq!(g.boundary_at_or_after(1001), 1010);
        assert_eq!(g.boundary_at_or_after(990), 990);
        assert_eq!(g.boundary_at_or_after(985), 990);
        assert_eq!(g.boundary_after(1000), 1010);
        assert_eq!(g.boundary_after(1009), 1010);
        assert_eq!(g.boundary_after(985), 990);
    }

    #[test]
    fn rows_cycle_from_the_epoch() {
        let g = SlotGrid::new(1000, 10);
        assert_eq!(g.row_at(999, 3), None);
        assert_eq!(g.row_at(1000, 3), Some(0));
        assert_eq!(g.row_at(1010, 3), Some(1));
        assert_eq!(g.row_at(1029, 3), Some(2));
        assert_eq!(g.row_at(1030, 3), Some(0));
        assert_eq!(g.row_at(2000, 0), None);
    }

    #[test]
    fn effective_instants_are_boundaries_a_lead_ahead_and_not_before_the_epoch() {
        let g = SlotGrid::new(1000, 10);
        assert_eq!(g.effective_from(1095, 20), 1120);
        assert_eq!(g.effective_from(1090, 20), 1110);
        assert_eq!(g.effective_from(0, 20), 1000);
        assert_eq!(
            g.effective_from(1095, -5),
            1100,
            "a negative lead is no lead"
        );
        let fresh = SlotGrid::starting_at_or_after(1095, 10);
        assert_eq!(fresh, SlotGrid::new(1100, 10));
        assert_eq!(SlotGrid::starting_at_or_after(-15, 10).epoch_ns, -10);
    }

    #[test]
    fn brute_force_agrees() {
        for (epoch, q) in [(0, 7), (-13, 5), (1_000_003, 1)] {
            let g = SlotGrid::new(epoch, q);
            for t in epoch - 40..epoch + 40 {
                let k = g.slot_at(t);
                assert!(g.slot_start(k) <= t && t < g.slot_start(k + 1));
                let b = g.boundary_at_or_after(t);
                assert!(b >= t && b - t < q && (b - epoch).rem_euclid(q) == 0);
                let a = g.boundary_after(t);
                assert!(a > t && a - t <= q && (a - epoch).rem_euclid(q) == 0);
            }
        }
    }
}
