//! The switch plan: the held tables and this node's ranks turned into precomputed lists,
//! so the switch thread only indexes and signals. Pure: no clock reads, no processes;
//! targets are indices into the caller's list of ranks.
//!
//! For each held table (a *phase*, in force from its `from_ns`) and each row: the targets
//! to switch out (with how) and those to switch in. Targets the phase does not manage
//! (their job is not named in the table, its mode is NONE, or it is being cancelled) are
//! in the phase's `free` list: they must run, and are only acted on if the thread had
//! switched them out.

use std::collections::BTreeSet;

use gang_core::{GangMode, SlotGrid};

use crate::ranks::RankKey;
use crate::switch::table::Held;

/// How a target is switched out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// SIGSTOP (SIGCONT to switch in).
    Stop,
    /// base nice + 15 (base nice to switch in).
    Priority,
    /// The freezer cgroup: FROZEN (THAWED to switch in).
    Freeze,
}

/// One rank as the plan builder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetInfo {
    pub key: RankKey,
    /// The job the tables name it by: its own, or for a step its allocation's (whose
    /// slots it runs in).
    pub slot_job: u64,
    /// The job's mode, as the rank was launched with it (`LaunchRequest.gang`): tables
    /// carry no modes, so this is the only one.
    pub mode: GangMode,
    /// Whether the rank has its own freezer cgroup.
    pub freezer: bool,
}

/// Switch out `target` by `method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    pub target: u32,
    pub method: Method,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// Stopped first.
    pub out: Vec<Out>,
    /// Then continued.
    pub run: Vec<u32>,
}

/// One held table, precomputed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    pub version: u64,
    /// The table's slots (every phase of one master run has the same grid).
    pub grid: SlotGrid,
    /// In force from here (until the next phase's `from_ns`).
    pub from_ns: i64,
    pub rows: Vec<Row>,
    /// Targets this phase leaves running.
    pub free: Vec<u32>,
    /// Whether rows differ here, i.e. its slot boundaries switch anything (not on an idle
    /// node, nor with one row or one job in every row).
    pub switches: bool,
}

/// What should hold at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want<'a> {
    /// No table in force (or before its epoch, or no rows): everything runs.
    Free(&'a [u32]),
    /// Slot `slot` of phase `phase` runs `row`; `free` runs too.
    Slot {
        phase: &'a Phase,
        slot: i64,
        row: &'a Row,
        free: &'a [u32],
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// By `from_ns`, increasing.
    pub phases: Vec<Phase>,
    /// Every target (for instants with no table in force).
    pub all: Vec<u32>,
}

/// How a target whose job a table names is switched out; None if never (mode NONE).
fn method(t: &TargetInfo) -> Option<Method> {
    match t.mode {
        GangMode::None => None,
        GangMode::Priority => Some(Method::Priority),
        // FREEZE without a cgroup (no writable freezer at launch) falls back to signals.
        GangMode::Freeze if t.freezer => Some(Method::Freeze),
        GangMode::Freeze | GangMode::Stop => Some(Method::Stop),
    }
}

/// Build the plan for `targets` under the `held` tables; jobs in `dying` are not managed.
pub fn build(held: &[Held], targets: &[TargetInfo], dying: &BTreeSet<u64>) -> Plan {
    let phases = held
        .iter()
        .map(|h| {
            let t = &h.table;
            // A parked job is named but run by no row, so it goes out in every one; a table
            // left with no rows at all (everything here parked) still keeps its parked jobs
            // out: one row in which nothing runs.
            let runs: &[u64] = if t.rows.is_empty() && !t.parked.is_empty() {
                &[0]
            } else {
                &t.rows
            };
            let mut rows = vec![Row::default(); runs.len()];
            let mut free = Vec::new();
            for (i, target) in targets.iter().enumerate() {
                let i = i as u32;
                let job = target.slot_job;
                let dies = dying.contains(&target.key.job_id) || dying.contains(&job);
                let how = if dies || !t.names(job) {
                    None
                } else {
                    method(target)
                };
                let Some(how) = how else {
                    free.push(i);
                    continue;
                };
                for (row, &runs) in rows.iter_mut().zip(runs) {
                    if runs == job {
                        row.run.push(i);
                    } else {
                        row.out.push(Out {
                            target: i,
                            method: how,
                        });
                    }
                }
            }
            let switches = rows.windows(2).any(|w| w[0].run != w[1].run);
            Phase {
                version: t.version,
                grid: t.grid,
                from_ns: h.from_ns,
                rows,
                free,
                switches,
            }
        })
        .collect();
    Plan {
        phases,
        all: (0..targets.len() as u32).collect(),
    }
}

impl Plan {
    /// The phase in force at `t_ns`.
    pub fn phase_at(&self, t_ns: i64) -> Option<&Phase> {
        self.phases.iter().rev().find(|p| p.from_ns <= t_ns)
    }

    /// What should hold at `t_ns`.
    pub fn want_at(&self, t_ns: i64) -> Want<'_> {
        let Some(phase) = self.phase_at(t_ns) else {
            return Want::Free(&self.all);
        };
        let Some(row) = phase.grid.row_at(t_ns, phase.rows.len()) else {
            return Want::Free(&self.all);
        };
        Want::Slot {
            phase,
            slot: phase.grid.slot_at(t_ns),
            row: &phase.rows[row],
            free: &phase.free,
        }
    }

    /// The first instant strictly after `t_ns` at which what should hold may change: the
    /// next slot boundary of the phase in force (if its rows differ), or the start of the
    /// next phase.
    pub fn next_boundary_after(&self, t_ns: i64) -> Option<i64> {
        let next_phase = self
            .phases
            .iter()
            .find(|p| p.from_ns > t_ns)
            .map(|p| p.from_ns);
        let next_slot = self
            .phase_at(t_ns)
            .filter(|p| p.switches)
            .map(|p| p.grid.boundary_after(t_ns));
        match (next_slot, next_phase) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The last boundary at or before `t_ns` (what a late wake-up catches up to).
    pub fn boundary_at_or_before(&self, t_ns: i64) -> Option<i64> {
        let p = self.phase_at(t_ns)?;
        // The phase's start is a switch instant too, even if it is no boundary of its grid.
        Some(p.grid.slot_start(p.grid.slot_at(t_ns)).max(p.from_ns))
    }

    /// Targets switched out in some row of some phase (for diagnostics and tests).
    pub fn managed(&self) -> BTreeSet<u32> {
        self.phases
            .iter()
            .flat_map(|p| p.rows.iter())
            .flat_map(|r| r.out.iter().map(|o| o.target).chain(r.run.iter().copied()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::table::{Table, Tables};

    fn key(job_id: u64, rank: u32) -> RankKey {
        RankKey { job_id, rank }
    }

    fn target(job_id: u64, rank: u32, mode: GangMode, freezer: bool) -> TargetInfo {
        TargetInfo {
            key: key(job_id, rank),
            slot_job: job_id,
            mode,
            freezer,
        }
    }

    fn table(version: u64, effective_ns: i64, rows: Vec<u64>) -> Table {
        Table {
            version,
            grid: SlotGrid::new(1_000, 100),
            effective_ns,
            rows,
            parked: vec![],
        }
    }

    fn held(tables: Vec<Table>) -> Vec<Held> {
        let mut t = Tables::new();
        for table in tables {
            t.offer(table, 0);
        }
        t.held().to_vec()
    }

    fn outs(targets: &[u32], method: Method) -> Vec<Out> {
        targets
            .iter()
            .map(|&target| Out { target, method })
            .collect()
    }

    #[test]
    fn rows_become_out_then_run_lists() {
        // Job 1 (2 ranks) in row 0, job 2 in row 1, row 2 idle here.
        let targets = [
            target(1, 0, GangMode::Stop, false),
            target(1, 1, GangMode::Stop, false),
            target(2, 0, GangMode::Stop, false),
        ];
        let t = table(1, 1_000, vec![1, 2, 0]);
        let plan = build(&held(vec![t]), &targets, &BTreeSet::new());
        let p = &plan.phases[0];
        assert_eq!(p.rows[0].out, outs(&[2], Method::Stop));
        assert_eq!(p.rows[0].run, vec![0, 1]);
        assert_eq!(p.rows[1].out, outs(&[0, 1], Method::Stop));
        assert_eq!(p.rows[1].run, vec![2]);
        assert_eq!(p.rows[2].out, outs(&[0, 1, 2], Method::Stop));
        assert!(p.rows[2].run.is_empty());
        assert!(p.free.is_empty());
        assert_eq!(plan.managed(), BTreeSet::from([0, 1, 2]));
    }

    #[test]
    fn parked_jobs_stay_out_in_every_row_even_with_no_rows_left() {
        let targets = [
            target(1, 0, GangMode::Stop, false),
            target(2, 0, GangMode::Stop, false),
            target(3, 0, GangMode::Freeze, true),
        ];
        let mut t = table(1, 1_000, vec![1]);
        t.parked = vec![2, 3];
        let plan = build(&held(vec![t]), &targets, &BTreeSet::new());
        let p = &plan.phases[0];
        assert_eq!(p.rows.len(), 1);
        assert_eq!(p.rows[0].run, vec![0]);
        assert_eq!(
            p.rows[0].out,
            vec![
                Out {
                    target: 1,
                    method: Method::Stop
                },
                Out {
                    target: 2,
                    method: Method::Freeze
                }
            ]
        );
        assert!(p.free.is_empty());
        // Everything here parked: the table has no rows, and still nothing runs.
        let mut t = table(2, 1_000, vec![]);
        t.parked = vec![1, 2, 3];
        let plan = build(&held(vec![t]), &targets, &BTreeSet::new());
        let p = &plan.phases[0];
        assert_eq!(p.rows.len(), 1);
        assert!(p.rows[0].run.is_empty());
        assert_eq!(p.rows[0].out.len(), 3);
        assert!(matches!(plan.want_at(1_050), Want::Slot { .. }));
        // A job that is cancelled (dying) is let go even if parked.
        let mut t = table(3, 1_000, vec![1]);
        t.parked = vec![2];
        let plan = build(&held(vec![t]), &targets, &BTreeSet::from([2]));
        assert_eq!(plan.phases[0].free, vec![1, 2]);
    }

    #[test]
    fn unnamed_none_and_dying_jobs_are_free() {
        let targets = [
            target(1, 0, GangMode::Stop, false),
            // Not in the table: just launched, before its table.
            target(3, 0, GangMode::Stop, false),
            target(4, 0, GangMode::None, false),
            target(5, 0, GangMode::Stop, false),
        ];
        let t = table(1, 1_000, vec![1, 4, 5]);
        let plan = build(&held(vec![t]), &targets, &BTreeSet::from([5]));
        let p = &plan.phases[0];
        assert_eq!(p.free, vec![1, 2, 3]);
        for row in &p.rows {
            assert!(row.out.iter().all(|o| o.target == 0));
            assert!(row.run.iter().all(|&r| r == 0));
        }
        assert_eq!(plan.managed(), BTreeSet::from([0]));
    }

    #[test]
    fn modes_come_from_the_launch_and_freeze_needs_a_cgroup() {
        let targets = [
            target(1, 0, GangMode::Priority, false),
            target(2, 0, GangMode::Freeze, true),
            // No cgroup (no writable freezer at launch): signals.
            target(3, 0, GangMode::Freeze, false),
            target(4, 0, GangMode::Freeze, true),
        ];
        let t = table(1, 1_000, vec![1, 2, 3, 4]);
        let plan = build(&held(vec![t]), &targets, &BTreeSet::new());
        // Row 3 runs job 4: the others go out, each its way.
        assert_eq!(
            plan.phases[0].rows[3].out,
            vec![
                Out {
                    target: 0,
                    method: Method::Priority
                },
                Out {
                    target: 1,
                    method: Method::Freeze
                },
                Out {
                    target: 2,
                    method: Method::Stop
                },
            ]
        );
        assert_eq!(
            plan.phases[0].rows[0].out[2],
            Out {
                target: 3,
                method: Method::Freeze
            }
        );
    }

    #[test]
    fn a_step_runs_in_its_allocations_slots_and_leaves_them_with_it() {
        // Job 7 is a step of allocation 5 (whose batch script is target 0); job 6 beside.
        let step = TargetInfo {
            slot_job: 5,
            ..target(7, 0, GangMode::Stop, false)
        };
        let targets = [
            target(5, 0, GangMode::Stop, false),
            step,
            target(6, 0, GangMode::Stop, false),
        ];
        let t = table(1, 1_000, vec![5, 6]);
        let plan = build(&held(vec![t.clone()]), &targets, &BTreeSet::new());
        let p = &plan.phases[0];
        assert_eq!(p.rows[0].run, vec![0, 1]);
        assert_eq!(p.rows[1].run, vec![2]);
        assert_eq!(
            p.rows[1].out.iter().map(|o| o.target).collect::<Vec<_>>(),
            vec![0, 1]
        );
        // The step being cancelled is let go; so are all of an allocation being cancelled.
        let plan = build(&held(vec![t.clone()]), &targets, &BTreeSet::from([7]));
        assert_eq!(plan.phases[0].free, vec![1]);
        let plan = build(&held(vec![t]), &targets, &BTreeSet::from([5]));
        assert_eq!(plan.phases[0].free, vec![0, 1]);
    }

    #[test]
    fn a_job_in_several_rows_runs_in_each() {
        let targets = [
            target(1, 0, GangMode::Stop, false),
            target(2, 0, GangMode::Stop, false),
        ];
        let t = table(1, 1_000, vec![1, 2, 1]);
        let plan = build(&held(vec![t]), &targets, &BTreeSet::new());
        let p = &plan.phases[0];
        assert_eq!(p.rows[0].run, vec![0]);
        assert_eq!(p.rows[2].run, vec![0]);
        assert_eq!(p.rows[1].run, vec![1]);
    }

    #[test]
    fn what_holds_when_and_the_next_boundary() {
        let targets = [
            target(1, 0, GangMode::Stop, false),
            target(2, 0, GangMode::Stop, false),
        ];
        // v1 in force from 1000 (rows 1,2), v2 from 1500 (rows 2,1 and a third idle row).
        let plan = build(
            &held(vec![
                table(1, 1_000, vec![1, 2]),
                table(2, 1_500, vec![2, 1, 0]),
            ]),
            &targets,
            &BTreeSet::new(),
        );
        assert_eq!(plan.want_at(999), Want::Free(&[0, 1]));
        assert_eq!(plan.next_boundary_after(0), Some(1_000));
        assert_eq!(plan.next_boundary_after(999), Some(1_000));
        let Want::Slot {
            phase, slot, row, ..
        } = plan.want_at(1_000)
        else {
            panic!("a slot at 1000");
        };
        assert_eq!((phase.version, slot, &row.run), (1, 0, &vec![0]));
        let Want::Slot { slot, row, .. } = plan.want_at(1_199) else {
            panic!("a slot at 1199");
        };
        assert_eq!((slot, &row.run), (1, &vec![1]));
        assert_eq!(plan.next_boundary_after(1_000), Some(1_100));
        assert_eq!(plan.next_boundary_after(1_450), Some(1_500));
        // Slot 5 of v2's grid runs row 5 mod 3 = 2: nobody.
        let Want::Slot {
            phase, slot, row, ..
        } = plan.want_at(1_500)
        else {
            panic!("a slot at 1500");
        };
        assert_eq!((phase.version, slot), (2, 5));
        assert!(row.run.is_empty());
        assert_eq!(row.out.len(), 2);
        assert_eq!(plan.next_boundary_after(1_500), Some(1_600));
        assert_eq!(plan.boundary_at_or_before(1_577), Some(1_500));
        assert_eq!(plan.boundary_at_or_before(1_234), Some(1_200));
        assert_eq!(plan.boundary_at_or_before(900), None);

        // Rows that do not differ: no boundary to wake for.
        let same = build(
            &held(vec![table(1, 1_000, vec![1, 1]), table(2, 1_500, vec![0])]),
            &targets,
            &BTreeSet::new(),
        );
        assert!(!same.phases[0].switches && !same.phases[1].switches);
        assert_eq!(same.next_boundary_after(1_000), Some(1_500));
        assert_eq!(same.next_boundary_after(1_500), None);
        assert!(plan.phases.iter().all(|p| p.switches));

        // No tables: everything runs, and there is nothing to wait for.
        let empty = build(&[], &targets, &BTreeSet::new());
        assert_eq!(empty.want_at(5_000), Want::Free(&[0, 1]));
        assert_eq!(empty.next_boundary_after(5_000), None);
    }

    #[test]
    fn a_late_table_keeps_the_old_rows_until_the_next_boundary() {
        let targets = [
            target(1, 0, GangMode::Stop, false),
            target(2, 0, GangMode::Stop, false),
        ];
        let mut t = Tables::new();
        t.offer(table(1, 1_000, vec![1, 2]), 900);
        // v2 (only job 2) was due at 1200 but arrives at 1250.
        t.offer(table(2, 1_200, vec![2]), 1_250);
        let plan = build(t.held(), &targets, &BTreeSet::new());
        // Slot 2 (1200..1300) stays v1's row 0 (job 1) here.
        let Want::Slot { phase, row, .. } = plan.want_at(1_250) else {
            panic!("a slot");
        };
        assert_eq!((phase.version, &row.run), (1, &vec![0]));
        assert_eq!(plan.next_boundary_after(1_250), Some(1_300));
        let Want::Slot {
            phase, row, free, ..
        } = plan.want_at(1_300)
        else {
            panic!("a slot");
        };
        assert_eq!((phase.version, &row.run, free), (2, &vec![1], &[0][..]));
    }
}
