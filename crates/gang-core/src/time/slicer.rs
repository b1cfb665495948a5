//! The slice-table planner: which table the master publishes when, which is in force at an
//! instant, and how long each job has run under them (a time limit counts run time, not
//! time spent stopped).
//!
//! Pure: time comes in as an argument. Tables share one [`SlotGrid`] for as long as the
//! quantum stays the same, so a new version never shifts the boundaries agents already
//! sleep to, and each takes effect at a boundary at least `lead` ahead, so every agent has
//! it in time.

use std::collections::{BTreeSet, VecDeque};

use crate::plan::JobId;
use crate::time::grid::SlotGrid;
use crate::time::matrix::SliceMatrix;
use crate::time::table::SliceTable;

#[derive(Debug, Clone)]
pub struct Slicer {
    quantum_ns: i64,
    lead_ns: i64,
    /// What the network adds to `lead_ns` (see [`Slicer::set_network_lead`]).
    network_lead_ns: i64,
    /// Fixed by the first table (or kept from the last master run).
    grid: Option<SlotGrid>,
    version: u64,
    /// `(effective_ns, table)`, oldest first; the first is in force once its time came.
    tables: VecDeque<(i64, SliceTable)>,
    /// Tables published by this planner (this master run): versions are microsecond
    /// clock readings, which mean nothing to people, so they are shown as this count.
    published: u64,
    /// `(version, count)` of the last [`SEQS_KEPT`] tables published, oldest first.
    seqs: VecDeque<(u64, u64)>,
}

/// How many versions [`Slicer::seq_of`] remembers: agents acknowledge a table within a
/// heartbeat or two, so an older one is "old" to whoever looks.
const SEQS_KEPT: usize = 256;

impl Slicer {
    /// `version` is the last version published and `epoch_ns` the grid of the last master
    /// run, kept so that a restarted master's first table lines up with what agents cycle.
    pub fn new(quantum_ns: i64, lead_ns: i64, version: u64, epoch_ns: Option<i64>) -> Self {
        assert!(quantum_ns > 0, "a quantum must be positive");
        Slicer {
            quantum_ns,
            lead_ns: lead_ns.max(0),
            network_lead_ns: 0,
            grid: epoch_ns.map(|e| SlotGrid::new(e, quantum_ns)),
            version,
            tables: VecDeque::new(),
            published: 0,
            seqs: VecDeque::new(),
        }
    }

    /// A table version as a short count, 1 for the first table of this run: `None` for a
    /// version this run did not publish (an earlier run's) or has forgotten.
    pub fn seq_of(&self, version: u64) -> Option<u64> {
        self.seqs
            .iter()
            .rev()
            .find(|(v, _)| *v == version)
            .map(|(_, s)| *s)
    }

    pub fn quantum_ns(&self) -> i64 {
        self.quantum_ns
    }

    /// The slot grid, once a table was made.
    pub fn grid(&self) -> Option<SlotGrid> {
        self.grid
    }

    /// The time a table now takes to reach the farthest agent (the longest round trip
    /// the agents see): added to the configured lead for the tables made from now on, so
    /// that an agent behind a slow link still has each before it takes effect.
    pub fn set_network_lead(&mut self, ns: i64) {
        self.network_lead_ns = ns.max(0);
    }

    /// The lead the next table gets: the configured one plus the network's.
    pub fn lead_ns(&self) -> i64 {
        self.lead_ns.saturating_add(self.network_lead_ns)
    }

    /// The last version published.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The newest table, and when it takes effect.
    pub fn latest(&self) -> Option<(i64, &SliceTable)> {
        self.tables.back().map(|(e, t)| (*e, t))
    }

    /// The table in force at `t`.
    pub fn in_force(&self, t: i64) -> Option<(i64, &SliceTable)> {
        self.tables
            .iter()
            .rev()
            .find(|(e, _)| *e <= t)
            .map(|(e, t)| (*e, t))
    }

    /// Whether [`Slicer::update`] would make a new table: the matrix's rows or the parked
    /// jobs differ from the newest table's. A caller checks this first when what it sets
    /// before an update costs more than the check (the network's lead walks every agent).
    pub fn differs(&self, matrix: &SliceMatrix, parked: &BTreeSet<JobId>) -> bool {
        let grid = self
            .grid
            .unwrap_or_else(|| SlotGrid::new(0, self.quantum_ns));
        !self.is_latest(&SliceTable::from_matrix(matrix, parked, 0, grid))
    }

    fn is_latest(&self, next: &SliceTable) -> bool {
        self.tables
            .back()
            .is_some_and(|(_, t)| t.rows == next.rows && t.parked == next.parked)
    }

    /// Make a new table if the matrix's rows differ from the newest table's. It takes
    /// effect at the first boundary at least `lead` after `now`; a table not yet in force
    /// that late enough is replaced (same instant, newer version), so agents never need
    /// to hold more than one table ahead of the one in force.
    ///
    /// `parked`: placed jobs given no slots (see [`SliceTable`]).
    pub fn update(
        &mut self,
        matrix: &SliceMatrix,
        parked: &BTreeSet<JobId>,
        now_ns: i64,
    ) -> Option<(i64, &SliceTable)> {
        let (lead, quantum) = (self.lead_ns(), self.quantum_ns);
        let grid = *self
            .grid
            .get_or_insert_with(|| SlotGrid::starting_at_or_after(now_ns + lead, quantum));
        // Versions grow by one, and never fall behind the clock in microseconds: a master
        // that lost its database, or crashed before committing a version it had sent,
        // still outnumbers every table agents hold (they ignore older versions).
        let version = (self.version + 1).max(u64::try_from(now_ns / 1000).unwrap_or(0));
        let next = SliceTable::from_matrix(matrix, parked, version, grid);
        if self.is_latest(&next) {
            return None;
        }
        self.version = version;
        self.published += 1;
        if self.seqs.len() == SEQS_KEPT {
            self.seqs.pop_front();
        }
        self.seqs.push_back((version, self.published));
        let at = now_ns + lead;
        let effective = grid.effective_from(now_ns, lead);
        match self.tables.back() {
            Some((e, _)) if *e >= at => {
                let e = *e;
                self.tables.pop_back();
                self.tables.push_back((e, next));
            }
            _ => self.tables.push_back((effective, next)),
        }
        self.latest()
    }

    /// How long `job` ran in `[from, to)`: in its rows' slots under each table in force,
    /// and all the time while no table in force names it (agents leave such jobs running:
    /// just started, before their first table) or when it is never switched (`always`);
    /// nothing while it is parked.
    pub fn run_ns(&self, job: JobId, always: bool, from: i64, to: i64) -> i64 {
        if to <= from {
            return 0;
        }
        if always {
            return to - from;
        }
        let mut total = 0;
        // Segments [start, end) with the table in force (None before the first).
        let mut start = from;
        let mut current = self.in_force(from).map(|(_, t)| t);
        for (e, t) in self.tables.iter().filter(|(e, _)| *e > from && *e < to) {
            total += segment(current, job, start, *e);
            start = *e;
            current = Some(t);
        }
        total + segment(current, job, start, to)
    }

    /// Forget tables superseded before `t` (keep the one in force at `t`).
    pub fn prune(&mut self, t: i64) {
        while self.tables.len() > 1 && self.tables[1].0 <= t {
            self.tables.pop_front();
        }
    }
}

fn segment(table: Option<&SliceTable>, job: JobId, a: i64, b: i64) -> i64 {
    match table {
        // Held switched out by every agent: no time at all.
        Some(t) if t.parks(job) => 0,
        Some(t) if t.names(job) => t.scheduled_ns(job, a, b),
        _ => b - a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, JobSpec, Scheduler, Shape};

    const Q: i64 = 10_000_000;

    fn sched() -> Scheduler {
        Scheduler::new(
            Shape::new(4, 4),
            Config {
                mpl: 3,
                ..Config::default()
            },
        )
        .unwrap()
    }

    fn spec(id: u64) -> JobSpec {
        JobSpec {
            id: JobId(id),
            shape: Shape::new(4, 4),
            estimate: None,
            user: 0,
        }
    }

    #[test]
    fn tables_stay_on_one_grid_and_take_effect_a_lead_ahead() {
        let mut s = sched();
        let mut sl = Slicer::new(Q, 3 * Q, 0, None);
        assert!(sl.differs(s.matrix(), &BTreeSet::new()), "no table yet");
        s.submit(0.0, spec(1)).unwrap();
        assert!(sl.differs(s.matrix(), &BTreeSet::new()));
        let (e1, t1) = sl.update(s.matrix(), &BTreeSet::new(), 5).unwrap();
        assert_eq!((e1, t1.version, t1.grid.epoch_ns), (4 * Q, 1, 4 * Q));
        assert!(!sl.differs(s.matrix(), &BTreeSet::new()));
        assert!(
            sl.update(s.matrix(), &BTreeSet::new(), 7).is_none(),
            "same rows, no new table"
        );
        assert!(
            sl.differs(s.matrix(), &BTreeSet::from([JobId(1)])),
            "parked"
        );
        s.submit(0.0, spec(2)).unwrap();
        assert!(sl.differs(s.matrix(), &BTreeSet::new()));
        // Later than the pending table's time: a new boundary on the same grid.
        let (e2, t2) = sl.update(s.matrix(), &BTreeSet::new(), 2 * Q + 1).unwrap();
        assert_eq!(
            (e2, t2.version, t2.grid.epoch_ns, t2.rows.len()),
            (6 * Q, 20_000, 4 * Q, 2),
            "the clock in microseconds outruns version 2"
        );
        assert_eq!(sl.in_force(5 * Q).unwrap().1.version, 1);
        assert_eq!(sl.in_force(6 * Q).unwrap().1.version, 20_000);
        assert!(sl.in_force(4 * Q - 1).is_none());
        // Early enough to replace the pending table at its instant.
        s.submit(0.0, spec(3)).unwrap();
        let (e3, t3) = sl.update(s.matrix(), &BTreeSet::new(), 2 * Q + 2).unwrap();
        assert_eq!((e3, t3.version, t3.rows.len()), (6 * Q, 20_001, 3));
        assert_eq!(sl.tables.len(), 2);
        sl.prune(7 * Q);
        assert_eq!(sl.tables.len(), 1);
        assert_eq!(sl.in_force(7 * Q).unwrap().1.version, 20_001);
    }

    #[test]
    fn a_slow_network_pushes_new_tables_further_ahead() {
        let mut s = sched();
        let mut sl = Slicer::new(Q, 2 * Q, 0, Some(0));
        s.submit(0.0, spec(1)).unwrap();
        // A round trip of 5 quanta to the farthest agent: 2 + 5 quanta ahead.
        sl.set_network_lead(5 * Q);
        assert_eq!(sl.lead_ns(), 7 * Q);
        let (e, _) = sl.update(s.matrix(), &BTreeSet::new(), Q + 1).unwrap();
        assert_eq!(e, 9 * Q);
        // Back to a fast network: the configured lead alone (a bogus negative is none).
        sl.set_network_lead(-1);
        s.submit(0.0, spec(2)).unwrap();
        let (e, _) = sl.update(s.matrix(), &BTreeSet::new(), 20 * Q + 1).unwrap();
        assert_eq!(e, 23 * Q);
    }

    #[test]
    fn versions_are_counted_for_people() {
        let m = crate::time::matrix::SliceMatrix::new(crate::mesh::Shape::new(2, 2));
        let mut sl = Slicer::new(Q, 0, 0, None);
        let v1 = sl
            .update(&m, &BTreeSet::new(), 1_700_000_000_000_000_000)
            .unwrap()
            .1
            .version;
        assert!(v1 > 1_000_000, "a clock reading: {v1}");
        assert_eq!(sl.seq_of(v1), Some(1));
        assert_eq!(sl.seq_of(v1 + 1), None);
    }

    #[test]
    fn versions_outgrow_a_lost_database_and_a_kept_epoch_is_reused() {
        let mut s = sched();
        s.submit(0.0, spec(1)).unwrap();
        let now = 1_700_000_000_000_000_000; // ns
        let mut sl = Slicer::new(Q, 2 * Q, 0, Some(5 * Q));
        let (e, t) = sl.update(s.matrix(), &BTreeSet::new(), now).unwrap();
        assert_eq!(
            t.version, 1_700_000_000_000_000,
            "microseconds of the clock"
        );
        assert_eq!(t.grid.epoch_ns, 5 * Q, "the kept grid");
        assert_eq!((e - 5 * Q) % Q, 0);
        assert!(e >= now + 2 * Q);
        s.submit(0.0, spec(2)).unwrap();
        let (_, t2) = sl.update(s.matrix(), &BTreeSet::new(), now).unwrap();
        assert_eq!(
            t2.version, 1_700_000_000_000_001,
            "one more, within one microsecond"
        );
    }

    #[test]
    fn run_time_counts_only_the_job_s_slots_once_its_table_is_in_force() {
        let mut s = sched();
        let mut sl = Slicer::new(Q, 0, 0, None);
        s.submit(0.0, spec(1)).unwrap();
        sl.update(s.matrix(), &BTreeSet::new(), 0).unwrap(); // job 1 alone from 0
        s.submit(0.0, spec(2)).unwrap();
        let (e, _) = sl.update(s.matrix(), &BTreeSet::new(), 10 * Q).unwrap(); // two rows from 10q
        assert_eq!(e, 10 * Q);
        // Alone: all the time; then every other slot.
        assert_eq!(sl.run_ns(JobId(1), false, 0, 10 * Q), 10 * Q);
        assert_eq!(sl.run_ns(JobId(1), false, 10 * Q, 20 * Q), 5 * Q);
        assert_eq!(sl.run_ns(JobId(2), false, 10 * Q, 20 * Q), 5 * Q);
        assert_eq!(sl.run_ns(JobId(1), false, 5 * Q, 15 * Q), 5 * Q + 3 * Q);
        // Job 2 ran unmanaged before its table.
        assert_eq!(sl.run_ns(JobId(2), false, 8 * Q, 10 * Q), 2 * Q);
        // Never switched: wall time.
        assert_eq!(sl.run_ns(JobId(1), true, 10 * Q, 20 * Q), 10 * Q);
        // Shares add up to the wall time while both run.
        let (a, b) = (10 * Q + 3, 37 * Q + 7);
        assert_eq!(
            sl.run_ns(JobId(1), false, a, b) + sl.run_ns(JobId(2), false, a, b),
            b - a
        );
    }
}
