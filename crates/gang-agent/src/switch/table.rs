//! The slice tables an agent holds, and which one is in force when. Pure: time is an
//! argument.
//!
//! A table's slots are those of its `gang_core::SlotGrid` (slot k covers
//! `[epoch + k*q, epoch + (k+1)*q)` on the master clock) and slot k runs row `k mod rows`;
//! every table of one master run has the same grid. A table is in force from its `effective_ns` until a newer table's.
//! `SetTable` keeps the newest version: an older one is ignored, an equal one is a no-op
//! (the master resends to laggards). A table that arrives after its effective time
//! applies from the next boundary of its grid (the agent catches up; it never switches
//! out of step mid-slot). The agent holds the table in force plus the pending ones (at
//! most `MAX_HELD` in all; the master keeps at most one ahead).

use gang_core::SlotGrid;
use gang_proto::v1::NodeTable;

/// The shortest quantum accepted: the switch thread runs at real-time priority, and a
/// sub-millisecond period would be mostly switching.
pub const MIN_QUANTUM_NS: i64 = 1_000_000;
/// Tables held at once: the one in force and those pending.
pub const MAX_HELD: usize = 4;

/// One node's view of a slice table, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub version: u64,
    pub grid: SlotGrid,
    pub effective_ns: i64,
    /// The job run in each row here; 0 = none.
    pub rows: Vec<u64>,
    /// Jobs here that run in no row: kept switched out (deadlocked, parked by the master).
    pub parked: Vec<u64>,
}

impl Table {
    pub fn from_proto(t: NodeTable) -> Result<Table, String> {
        if t.version == 0 {
            return Err("table version 0 is reserved for \"no table\"".into());
        }
        if t.quantum_ns < MIN_QUANTUM_NS {
            return Err(format!(
                "table {}: quantum {} ns is below the minimum of {MIN_QUANTUM_NS} ns",
                t.version, t.quantum_ns
            ));
        }
        Ok(Table {
            version: t.version,
            // The quantum was checked above: positive.
            grid: SlotGrid::new(t.epoch_ns, t.quantum_ns),
            effective_ns: t.effective_ns,
            rows: t.rows,
            parked: t.parked,
        })
    }

    /// Whether this table manages the job: a row runs it, or it is parked.
    pub fn names(&self, job_id: u64) -> bool {
        job_id != 0 && (self.rows.contains(&job_id) || self.parked.contains(&job_id))
    }
}

/// A table as held: from when it applies here (its effective time, or the first boundary
/// after its arrival if it came late).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub table: Table,
    pub from_ns: i64,
}

/// What `Tables::offer` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Newer than any held: kept. `late` if it arrived after its effective time.
    Accepted { from_ns: i64, late: bool },
    /// The newest held version again.
    Duplicate,
    /// Older than the newest held: ignored.
    Stale,
}

/// The tables held, oldest first; `from_ns` strictly increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    held: Vec<Held>,
}

impl Tables {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn held(&self) -> &[Held] {
        &self.held
    }

    /// The newest version held; 0 when none.
    pub fn newest_version(&self) -> u64 {
        self.held.last().map_or(0, |h| h.table.version)
    }

    /// Whether any held table names the job.
    pub fn names(&self, job_id: u64) -> bool {
        self.held.iter().any(|h| h.table.names(job_id))
    }

    /// Offer a table received at `now_ns` (master clock).
    pub fn offer(&mut self, table: Table, now_ns: i64) -> Offer {
        let newest = self.newest_version();
        if table.version < newest {
            return Offer::Stale;
        }
        if table.version == newest {
            return Offer::Duplicate;
        }
        let late = now_ns > table.effective_ns;
        let from_ns = if late {
            table.grid.boundary_after(now_ns)
        } else {
            table.effective_ns
        };
        // A held table that would apply at or after this one's start is superseded before
        // it ever is in force.
        self.held.retain(|h| h.from_ns < from_ns);
        self.held.push(Held { table, from_ns });
        self.prune(now_ns);
        while self.held.len() > MAX_HELD {
            // Beyond the bound (the master keeps one table ahead, so this is a master
            // misbehaving): give up the oldest pending table.
            self.held.remove(1);
        }
        Offer::Accepted { from_ns, late }
    }

    /// Forget tables no longer in force at `now_ns` (a newer one has taken over).
    pub fn prune(&mut self, now_ns: i64) {
        while self.held.len() >= 2 && self.held[1].from_ns <= now_ns {
            self.held.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn table(version: u64, effective_ns: i64, rows: Vec<u64>) -> Table {
        Table {
            version,
            grid: SlotGrid::new(1_000, 100),
            effective_ns,
            rows,
            parked: vec![],
        }
    }

    #[test]
    fn newest_version_wins_and_equal_is_idempotent() {
        let mut t = Tables::new();
        assert_eq!(t.newest_version(), 0);
        assert_eq!(
            t.offer(table(2, 1_000, vec![1, 2]), 500),
            Offer::Accepted {
                from_ns: 1_000,
                late: false
            }
        );
        assert_eq!(t.offer(table(2, 1_000, vec![1, 2]), 600), Offer::Duplicate);
        assert_eq!(t.offer(table(1, 1_000, vec![9]), 600), Offer::Stale);
        assert_eq!(t.newest_version(), 2);
        assert_eq!(t.held().len(), 1);
        assert_eq!(t.held()[0].table.rows, vec![1, 2]);
    }

    #[test]
    fn a_late_table_applies_at_the_next_boundary_of_its_grid() {
        let mut t = Tables::new();
        t.offer(table(1, 1_000, vec![1]), 900);
        // Effective at 1200, received at 1234: from 1300.
        assert_eq!(
            t.offer(table(2, 1_200, vec![2]), 1_234),
            Offer::Accepted {
                from_ns: 1_300,
                late: true
            }
        );
        // The old table is still in force until then.
        assert_eq!(t.held().len(), 2);
        t.prune(1_299);
        assert_eq!(t.held().len(), 2);
        t.prune(1_300);
        assert_eq!(t.held().len(), 1);
        assert_eq!(t.held()[0].table.version, 2);
        // Exactly at the effective time is not late.
        assert_eq!(
            t.offer(table(3, 1_500, vec![3]), 1_500),
            Offer::Accepted {
                from_ns: 1_500,
                late: false
            }
        );
    }

    #[test]
    fn a_newer_table_replaces_a_pending_one_it_starts_before() {
        let mut t = Tables::new();
        t.offer(table(1, 1_000, vec![1]), 900);
        t.offer(table(2, 2_000, vec![2]), 1_100);
        t.offer(table(3, 2_000, vec![3]), 1_150);
        let versions: Vec<u64> = t.held().iter().map(|h| h.table.version).collect();
        assert_eq!(versions, vec![1, 3]);
        // One starting later keeps the pending one before it.
        t.offer(table(4, 2_500, vec![4]), 1_200);
        let versions: Vec<u64> = t.held().iter().map(|h| h.table.version).collect();
        assert_eq!(versions, vec![1, 3, 4]);
        // The bound holds whatever the master sends.
        for v in 5..20 {
            t.offer(table(v, 2_500 + 100 * v as i64, vec![v]), 1_200);
        }
        assert_eq!(t.held().len(), MAX_HELD);
        assert_eq!(t.held()[0].table.version, 1);
        assert_eq!(t.newest_version(), 19);
    }

    #[test]
    fn proto_validation() {
        let ok = NodeTable {
            version: 1,
            epoch_ns: 0,
            quantum_ns: MIN_QUANTUM_NS,
            effective_ns: 0,
            rows: vec![5, 0],
            parked: vec![],
        };
        let t = Table::from_proto(ok.clone()).unwrap();
        assert_eq!(t.grid, SlotGrid::new(0, MIN_QUANTUM_NS));
        assert!(t.names(5) && !t.names(0) && !t.names(6));
        let mut bad = ok.clone();
        bad.quantum_ns = 999_999;
        assert!(Table::from_proto(bad).unwrap_err().contains("minimum"));
        let mut bad = ok;
        bad.version = 0;
        assert!(Table::from_proto(bad).is_err());
    }
}
