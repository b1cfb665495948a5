//! Slice tables: the slice matrix turned into a time schedule every agent can follow on its
//! own clock, with no message per switch.
//!
//! Slot `k` covers `[epoch + k*q, epoch + (k+1)*q)` and runs row `k mod rows`. Which row
//! runs at instant `t` is a pure function of the table and `t`; the code that stops and
//! continues processes lives in the agent.
//!
//! A *parked* job keeps its place in the matrix (its nodes stay its own in its slice) but
//! runs in no row: a deadlocked job left for its owner to look at gives its time back. A
//! row left with only parked jobs leaves the rotation, so the other rows share its slots;
//! agents keep parked jobs switched out at every boundary.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::mesh::Submesh;
use crate::plan::JobId;
use crate::time::grid::SlotGrid;
use crate::time::matrix::SliceMatrix;

/// One row of the table: the jobs of one slice (home and extra slots) and where they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub slice: u32,
    pub jobs: Vec<(JobId, Submesh)>,
}

/// A versioned schedule of the whole mesh on a slot grid: slot k runs row k mod rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceTable {
    pub version: u64,
    pub grid: SlotGrid,
    pub rows: Vec<Row>,
    /// Placed jobs that run in no row, and where they are.
    #[serde(default)]
    pub parked: Vec<(JobId, Submesh)>,
}

impl SliceTable {
    /// The table of `matrix` (rows in round-robin order) on `grid`, with the `parked` jobs
    /// out of every row (and rows holding nothing else out of the rotation).
    pub fn from_matrix(
        matrix: &SliceMatrix,
        parked: &BTreeSet<JobId>,
        version: u64,
        grid: SlotGrid,
    ) -> Self {
        let placed = |j: JobId| matrix.placement(j).map(|p| (j, p.submesh));
        let rows = matrix
            .slices()
            .iter()
            .map(|s| Row {
                slice: s.id.0,
                jobs: s
                    .jobs()
                    .iter()
                    .filter(|(j, _)| !parked.contains(j))
                    .filter_map(|&(j, _)| placed(j))
                    .collect(),
            })
            .filter(|r: &Row| !r.jobs.is_empty())
            .collect();
        SliceTable {
            version,
            grid,
            rows,
            parked: parked.iter().filter_map(|&j| placed(j)).collect(),
        }
    }

    /// Whether `job` is parked (placed, in no row).
    pub fn parks(&self, job: JobId) -> bool {
        self.parked.iter().any(|(j, _)| *j == job)
    }

    /// The parked jobs with a rank on node `(x, y)`.
    pub fn parked_on(&self, x: u32, y: u32) -> Vec<JobId> {
        self.parked
            .iter()
            .filter(|(_, s)| x >= s.x && x < s.x + s.w && y >= s.y && y < s.y + s.h)
            .map(|(j, _)| *j)
            .collect()
    }

    /// The row running at `t_ns`: `None` before the epoch or when there are no rows.
    pub fn row_at(&self, t_ns: i64) -> Option<usize> {
        self.grid.row_at(t_ns, self.rows.len())
    }

    /// Whether any row holds `job` (home or multiple-task slot).
    pub fn names(&self, job: JobId) -> bool {
        self.rows
            .iter()
            .any(|r| r.jobs.iter().any(|(j, _)| *j == job))
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
        let g = self.grid;
        // Scheduled time in [epoch, t).
        let upto = |t: i64| -> i64 {
            if t <= g.epoch_ns {
                return 0;
            }
            let k = g.slot_at(t);
            let (cycles, r) = (k / n, (k % n) as usize);
            let before = holds[..r].iter().filter(|&&h| h).count() as i64;
            let partial = if holds[r] { t - g.slot_start(k) } else { 0 };
            (cycles * per_cycle + before) * g.quantum_ns + partial
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Decision;
    use crate::{Config, JobSpec, Scheduler, Shape};

    fn table(rows: usize) -> SliceTable {
        SliceTable {
            version: 1,
            grid: SlotGrid::new(1000, 10),
            rows: (0..rows)
                .map(|i| Row {
                    slice: i as u32,
                    jobs: vec![],
                })
                .collect(),
            parked: vec![],
        }
    }

    #[test]
    fn rows_cycle_over_slots() {
        let t = table(3);
        assert_eq!(t.row_at(999), None);
        assert_eq!(t.row_at(1000), Some(0));
        assert_eq!(t.row_at(1029), Some(2));
        assert_eq!(t.row_at(1030), Some(0));
        assert_eq!(table(0).row_at(2000), None);
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
            user: 0,
        };
        s.submit(0.0, spec(1, 2, 4)).unwrap();
        s.submit(0.0, spec(2, 2, 4)).unwrap();
        let p = s.submit(0.0, spec(3, 2, 2)).unwrap();
        assert!(
            p.decisions
                .iter()
                .any(|d| matches!(d, Decision::AddSlot { .. }))
        );
        let t = SliceTable::from_matrix(
            s.matrix(),
            &BTreeSet::new(),
            7,
            SlotGrid::new(0, 10_000_000),
        );
        assert_eq!(t.rows.len(), 2);
        // Node (3,0): job 2 at home in row 0, and in row 1 as a multiple task.
        assert_eq!(t.for_node(3, 0), vec![Some(JobId(2)), Some(JobId(2))]);
        // Node (0,0): job 1 in row 0, job 3 in row 1.
        assert_eq!(t.for_node(0, 0), vec![Some(JobId(1)), Some(JobId(3))]);
        // Node (0,3): job 1 in row 0, idle in row 1.
        assert_eq!(t.for_node(0, 3), vec![Some(JobId(1)), None]);
    }

    /// A parked job leaves every row; a row with nothing else leaves the rotation, so the
    /// other rows get its slots; the parked job keeps its place and runs no time at all.
    #[test]
    fn a_parked_job_gives_its_slots_back() {
        let mut s = Scheduler::new(
            Shape::new(2, 1),
            Config {
                mpl: 3,
                ..Config::default()
            },
        )
        .unwrap();
        let spec = |id| JobSpec {
            id: JobId(id),
            shape: Shape::new(2, 1),
            estimate: None,
            user: 0,
        };
        for id in 1..=3 {
            s.submit(0.0, spec(id)).unwrap();
        }
        let grid = SlotGrid::new(0, 10);
        let all = SliceTable::from_matrix(s.matrix(), &BTreeSet::new(), 1, grid);
        assert_eq!(all.rows.len(), 3);
        assert_eq!(all.scheduled_ns(JobId(1), 0, 300), 100);
        let parked = BTreeSet::from([JobId(2)]);
        let t = SliceTable::from_matrix(s.matrix(), &parked, 2, grid);
        assert_eq!(t.rows.len(), 2, "job 2's row left the rotation");
        assert!(!t.names(JobId(2)));
        assert_eq!(t.scheduled_ns(JobId(2), 0, 300), 0);
        // Jobs 1 and 3 now share the time: half each.
        assert_eq!(t.scheduled_ns(JobId(1), 0, 300), 150);
        assert_eq!(t.scheduled_ns(JobId(3), 0, 300), 150);
        assert_eq!(t.parked_on(1, 0), vec![JobId(2)]);
        assert_eq!(t.for_node(1, 0), vec![Some(JobId(1)), Some(JobId(3))]);
        // All parked: no rows at all, and every job still listed where it is.
        let every = BTreeSet::from([JobId(1), JobId(2), JobId(3)]);
        let none = SliceTable::from_matrix(s.matrix(), &every, 3, grid);
        assert!(none.rows.is_empty());
        assert_eq!(none.parked_on(0, 0).len(), 3);
    }
}
