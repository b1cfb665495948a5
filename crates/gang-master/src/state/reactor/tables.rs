//! Slice tables published to the agents, and run time accounted under them.
//!
//! After each round, if the matrix's rows changed, a new version is published (the planner
//! is `gang_core::Slicer`): persisted, then sent to every agent that is up, each its own
//! view. Agents acknowledge; one that misses it gets it again when a heartbeat shows it
//! behind, or when it registers. A job's run time is the time its rows were scheduled
//! under the tables in force, and its time limit counts that, not time spent stopped.

use gang_core::JobId;
use tracing::debug;

use crate::job::Job;
use crate::state::effects::{Effect, Effects, Metric, NodeTable, Save};
use crate::state::{MasterState, Now};

/// The most a slow network adds to the table lead: past it, a link is too slow to
/// co-schedule over, and a longer lead would only delay every job's start.
const MAX_NETWORK_LEAD_NS: i64 = 1_000_000_000;

impl MasterState {
    /// A job's run time up to `wall_ns`: accounted, plus what its tables give since;
    /// nothing more once it was cancelled (its run time stops with the cancel).
    pub(in crate::state) fn run_ns(&self, j: &Job, wall_ns: i64) -> i64 {
        if !j.record.state().is_placed() || j.cancelled.is_some() {
            return j.record.run_ns;
        }
        j.record.run_ns
            + self.slicer.run_ns(
                j.slot_job(),
                !j.record.gang.is_switched(),
                j.run_accounted_to,
                wall_ns,
            )
    }

    /// Bring every placed job's run time up to now, and forget tables no longer needed.
    pub(in crate::state) fn account_run_time(&mut self, now: Now) {
        // Placed jobs are the running ones: no scan of the whole job history.
        // (And the steps of placed allocations, which run in their slots.)
        let ids: Vec<JobId> = self
            .sched
            .matrix()
            .placements()
            .flat_map(|(id, _)| std::iter::once(id).chain(self.jobs.steps_of(id).iter().copied()))
            .filter(|&id| {
                self.jobs
                    .get(id)
                    .is_some_and(|j| j.record.state().is_placed())
            })
            .collect();
        for id in ids {
            let Some(j) = self.jobs.get(id) else {
                continue;
            };
            let run = self.run_ns(j, now.wall_ns);
            let j = self.jobs.get_mut(id).expect("present");
            j.record.run_ns = run;
            j.run_accounted_to = now.wall_ns;
        }
        self.slicer.prune(now.wall_ns);
    }

    /// Publish a new table if the matrix's rows changed since the newest one.
    pub(in crate::state) fn publish_table(&mut self, fx: &mut Effects, now: Now) {
        // A new table takes effect after `now`, so run times accounted so far stay right.
        let parked = self.parked_jobs();
        // Most rounds change no row; the network's lead walks every agent (at 10,000
        // nodes it made this the master's costliest function during launches).
        if !self.slicer.differs(self.sched.matrix(), &parked) {
            return;
        }
        self.slicer.set_network_lead(self.network_lead_ns());
        let Some((effective, table)) =
            self.slicer
                .update(self.sched.matrix(), &parked, now.wall_ns)
        else {
            return;
        };
        let (version, grid, rows) = (table.version, table.grid, table.rows.len());
        fx.emit(Effect::Save(Save::TableMeta { version, grid }));
        fx.emit(Effect::Metric(Metric::TableVersion(version)));
        debug!(
            version,
            rows,
            lead_ns = effective - now.wall_ns,
            "slice table published"
        );
        for i in 0..self.nodes.len() {
            if self.nodes[i].up {
                self.send_table(fx, now, i);
            }
        }
    }

    /// How long a table sent now may take to reach the farthest agent that is up: two of
    /// the longest round trips its clock probes see (each twice the error bound an agent
    /// reports). One way may take a whole round trip; and the master's connection to an
    /// agent is idle between tables and launches, so TCP starts it again with a small
    /// window, and a table behind the launches of a job starting (their environments)
    /// waits one more round trip. On a LAN a fraction of a millisecond, which the
    /// configured lead covers; behind a slow link (50 ms each way: 208 ms) it is what
    /// keeps a new table from arriving after it took effect, which leaves that agent a slot
    /// behind the others. A frame lost on the way costs a retransmission (200 ms and
    /// more) that no lead covers. An agent that trusts its host clock reports no round
    /// trip: the configured lead is all it gets. The agents' word, so bounded.
    fn network_lead_ns(&self) -> i64 {
        self.nodes
            .iter()
            .filter(|n| n.up && !n.clock.from_host)
            .map(|n| n.clock.error_ns.clamp(0, MAX_NETWORK_LEAD_NS / 4) * 4)
            .max()
            .unwrap_or(0)
    }

    /// Node `i`'s view of the newest table.
    pub(in crate::state) fn node_table(&self, i: usize) -> Option<NodeTable> {
        let (effective, t) = self.slicer.latest()?;
        let (x, y) = self.coord(i);
        Some(NodeTable {
            version: t.version,
            grid: t.grid,
            effective_ns: effective,
            rows: t.for_node(x, y),
            parked: t.parked_on(x, y),
        })
    }

    pub(in crate::state) fn send_table(&mut self, fx: &mut Effects, now: Now, i: usize) {
        let Some(table) = self.node_table(i) else {
            return;
        };
        let coord = self.coord(i);
        let node = &mut self.nodes[i];
        let Some(addr) = node.address.as_deref() else {
            return;
        };
        node.table_sent = Some((table.version, now.mono_ns));
        fx.emit(Effect::Table {
            node: coord,
            address: addr.to_string(),
            table,
        });
    }
}
