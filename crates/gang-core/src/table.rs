//! Slice tables: the slice matrix turned into a time schedule every agent can follow on its
//! own clock, with no message per switch.
//!
//! Slot `k` covers `[epoch + k*q, epoch + (k+1)*q)` and runs row `k mod rows`. Which row
//! runs at instant `t` is a pure function of the table and `t`; the code that stops and
//! continues processes lives in the agent.

use serde::{Deserialize, Serialize};

use crate::matrix::SliceMatrix;
use crate::mesh::Submesh;
use crate::plan::JobId;

/// One row of the table: the jobs of one slice (home and extra slots) and where they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub slice: u32,
    pub jobs: Vec<(JobId, Submesh)>,
}

/// A versioned schedule of the whole mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceTable {
    pub version: u64,
    /// Start of slot 0, in master-clock nanoseconds.
    pub epoch_ns: i64,
    pub quantum_ns: i64,
    pub rows: Vec<Row>,
}

impl SliceTable {
    /// The table of `matrix` (rows in round-robin order), effective from `epoch_ns`.
    pub fn from_matrix(matrix: &SliceMatrix, version: u64, epoch_ns: i64, quantum_ns: i64) -> Self {
        assert!(quantum_ns > 0, "a quantum must be positive");
        let rows = matrix
            .slices()
            .iter()
            .map(|s| Row {
                slice: s.id.0,
                jobs: s
                    .jobs()
                    .iter()
                    .filter_map(|&(j, _)| matrix.placement(j).map(|p| (j, p.submesh)))
                    .collect(),
            })
            .collect();
        SliceTable {
            version,
            epoch_ns,
            quantum_ns,
            rows,
        }
    }

    /// The slot number at `t_ns` (negative before the epoch).
    pub fn slot_at(&self, t_ns: i64) -> i64 {
        (t_ns - self.epoch_ns).div_euclid(self.quantum_ns)
    }

    /// The row running at `t_ns`: `None` before the epoch or when there are no rows.
    pub fn row_at(&self, t_ns: i64) -> Option<usize> {
        let k = self.slot_at(t_ns);
        (k >= 0 && !self.rows.is_empty()).then(|| (k as usize) % self.rows.len())
    }

    /// The first slot boundary at or after `t_ns`.
    pub fn boundary_at_or_after(&self, t_ns: i64) -> i64 {
        let k = (t_ns - self.epoch_ns).div_euclid(self.quantum_ns);
        let b = self.epoch_ns + k * self.quantum_ns;
        if b == t_ns { b } else { b + self.quantum_ns }
    }

    /// How long `job` runs in `[from, to)`: the parts of the slots of the rows that hold
    /// it (home or multiple-task slots). Time before the epoch counts for nothing.
    pub fn scheduled_ns(&self, job: JobId, from: i64, to: i64) -> i64 {
        let holds: Vec<bool> = self
            .rows
            .iter()
            .map(|r| r.jobs.iter().any(|(j, _)| *j == job))
            .collect();
        let per_cycle = holds.iter().filter(|&&h| h).count() as i64;
        if per_cycle == 0 || to <= from {
            return 0;
        }
        let n = holds.len() as i64;
        // Scheduled time in [epoch, t).
        let upto = |t: i64| -> i64 {
            if t <= self.epoch_ns {
                return 0;
            }
            let k = self.slot_at(t);
            let (cycles, r) = (k / n, (k % n) as usize);
            let before = holds[..r].iter().filter(|&&h| h).count() as i64;
            let partial = if holds[r] {
                t - (self.epoch_ns + k * self.quantum_ns)
            } else {
                0
            };
            (cycles * per_cycle + before) * self.quantum_ns + partial
        };
        upto(to) - upto(from)
    }

    /// What node `(x, y)` runs in each row: at most one job (jobs of a slice never overlap).
    pub fn for_node(&self, x: u32, y: u32) -> Vec<Option<JobId>> {
        let on = |s: &Submesh| x >= s.x && x < s.x + s.w && y >= s.y && y < s.y + s.h;
        self.rows
            .iter()
            .map(|r| r.jobs.iter().find(|(_, s)| on(s)).map(|(j, _)| *j))
            .collect()
    }
}

/// When a new table should take effect: the first slot boundary at least `lead_ns` after
/// `now_ns` on the grid of the table in force (so slots stay aligned across versions), or
/// `now_ns + lead_ns` rounded up to a whole quantum when there is none. `lead_ns` is how
/// long every agent needs to receive the table.
pub fn effective_epoch(
    current: Option<&SliceTable>,
    now_ns: i64,
    lead_ns: i64,
    quantum_ns: i64,
) -> i64 {
    let at = now_ns + lead_ns;
    match current {
        Some(t) if t.quantum_ns == quantum_ns && at > t.epoch_ns => t.boundary_at_or_after(at),
        _ => {
            at.div_euclid(quantum_ns) * quantum_ns
                + if at.rem_euclid(quantum_ns) == 0 {
                    0
                } else {
                    quantum_ns
                }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Decision;
    use crate::{Config, JobSpec, Scheduler, Shape};

    fn table(rows: usize) -> SliceTable {
        SliceTable {
            version: 1,
            epoch_ns: 1000,
            quantum_ns: 10,
            rows: (0..rows)
                .map(|i| Row {
                    slice: i as u32,
                    jobs: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn rows_cycle_over_slots() {
        let t = table(3);
        assert_eq!(t.row_at(999), None);
        assert_eq!(t.row_at(1000), Some(0));
        assert_eq!(t.row_at(1009), Some(0));
        assert_eq!(t.row_at(1010), Some(1));
        assert_eq!(t.row_at(1029), Some(2));
        assert_eq!(t.row_at(1030), Some(0));
        assert_eq!(t.slot_at(995), -1);
        assert_eq!(table(0).row_at(2000), None);
    }

    #[test]
    fn boundaries_and_effective_epochs_stay_on_the_grid() {
        let t = table(2);
        assert_eq!(t.boundary_at_or_after(1000), 1000);
        assert_eq!(t.boundary_at_or_after(1001), 1010);
        assert_eq!(t.boundary_at_or_after(990), 990);
        // On the current grid, at least `lead` ahead.
        assert_eq!(effective_epoch(Some(&t), 1095, 20, 10), 1120);
        assert_eq!(effective_epoch(Some(&t), 1090, 20, 10), 1110);
        // No table, or a new quantum: a fresh grid.
        assert_eq!(effective_epoch(None, 1095, 20, 10), 1120);
        assert_eq!(effective_epoch(Some(&t), 1095, 20, 7), 1120);
    }

    #[test]
    fn scheduled_time_counts_only_the_rows_holding_the_job() {
        let mut t = table(3);
        t.rows[0].jobs.push((JobId(1), Submesh::new(0, 0, 1, 1)));
        t.rows[2].jobs.push((JobId(1), Submesh::new(0, 0, 1, 1)));
        t.rows[1].jobs.push((JobId(2), Submesh::new(0, 0, 1, 1)));
        // Slots of 10 from 1000: job 1 runs [1000,1010) and [1020,1040), and so on.
        assert_eq!(t.scheduled_ns(JobId(1), 0, 1000), 0);
        assert_eq!(t.scheduled_ns(JobId(1), 1000, 1030), 20);
        assert_eq!(t.scheduled_ns(JobId(1), 1005, 1025), 10);
        assert_eq!(t.scheduled_ns(JobId(2), 1005, 1025), 10);
        assert_eq!(t.scheduled_ns(JobId(1), 1000, 1000 + 30 * 100), 2000);
        assert_eq!(t.scheduled_ns(JobId(3), 1000, 5000), 0);
        assert_eq!(t.scheduled_ns(JobId(1), 1030, 1020), 0);
        // Brute force over every instant agrees.
        for (a, b) in [(990, 1100), (1013, 1077), (1040, 1041), (1019, 1020)] {
            for job in [JobId(1), JobId(2)] {
                let brute = (a..b)
                    .filter(|&i| {
                        t.row_at(i)
                            .is_some_and(|r| t.rows[r].jobs.iter().any(|(j, _)| *j == job))
                    })
                    .count() as i64;
                assert_eq!(t.scheduled_ns(job, a, b), brute, "{job:?} in [{a},{b})");
            }
        }
    }

    #[test]
    fn node_rows_follow_the_matrix_with_multiple_tasks() {
        let mut s = Scheduler::new(
            Shape::new(4, 4),
            Config {
                mpl: 2,
                ..Config::default()
            },
        )
        .unwrap();
        let spec = |id, w, h| JobSpec {
            id: JobId(id),
            shape: Shape::new(w, h),
            estimate: None,
        };
        s.submit(0.0, spec(1, 2, 4)).unwrap();
        s.submit(0.0, spec(2, 2, 4)).unwrap();
        let p = s.submit(0.0, spec(3, 2, 2)).unwrap();
        assert!(
            p.decisions
                .iter()
                .any(|d| matches!(d, Decision::AddSlot { .. }))
        );
        let t = SliceTable::from_matrix(s.matrix(), 7, 0, 10_000_000);
        assert_eq!(t.rows.len(), 2);
        // Node (3,0): job 2 at home in row 0, and in row 1 as a multiple task.
        assert_eq!(t.for_node(3, 0), vec![Some(JobId(2)), Some(JobId(2))]);
        // Node (0,0): job 1 in row 0, job 3 in row 1.
        assert_eq!(t.for_node(0, 0), vec![Some(JobId(1)), Some(JobId(3))]);
        // Node (0,3): job 1 in row 0, idle in row 1.
        assert_eq!(t.for_node(0, 3), vec![Some(JobId(1)), None]);
    }
}
