//! What the daemon does with a saved round's effects (its saves are already committed, by
//! `Store`'s `Commit`): calls to agents, announcements, fence answers and metrics.

use std::collections::HashMap;

use gang_core::JobId;

use crate::actor::{Actor, calls, relays};
use crate::error::MasterError;
use crate::state::effects::{Coord, Effect, LaunchOrder, Metric, NodeTable};

impl Actor {
    /// What a saved round sends out.
    pub(super) fn carry_out(&mut self, effects: Vec<Effect>) {
        // Calls to agents are gathered by what they carry: an order for more agents than
        // the fanout width goes down the order tree as one, the rest one call each.
        let mut launches: HashMap<JobId, Vec<(Coord, String, LaunchOrder)>> = HashMap::new();
        let mut signals: HashMap<(JobId, u32), Vec<relays::Target>> = HashMap::new();
        let mut tables = Vec::new();
        for effect in effects {
            match effect {
                Effect::Save(_) => {} // committed with the round
                Effect::Launch {
                    node,
                    address,
                    order,
                } => launches
                    .entry(order.job)
                    .or_default()
                    .push((node, address, order)),
                Effect::Signal {
                    node,
                    address,
                    job,
                    grace_ms,
                } => signals
                    .entry((job, grace_ms))
                    .or_default()
                    .push((node, address)),
                Effect::Table {
                    node,
                    address,
                    table,
                } => tables.push((node, address, table)),
                Effect::JobChanged(view) => {
                    if view.state().is_final() {
                        self.end_fences(view.id);
                    }
                    let _ = self.handle.events.send(*view);
                }
                Effect::FenceDone { job, epoch, kvs } => {
                    for tx in self.fences.remove(&(job, epoch)).unwrap_or_default() {
                        let _ = tx.send(Ok(kvs.clone()));
                    }
                }
                Effect::Rank0Running { job, node, address } => {
                    let _ = self.handle.rank0.send((job, node, address));
                }
                Effect::Metric(m) => self.count(m),
            }
        }
        let (agents, tx, metrics) = (&self.agents, &self.handle.tx, &self.metrics);
        let fanout = agents.fanout;
        for (_, mut orders) in launches {
            orders.sort_by_key(|(_, _, o)| o.rank);
            // Fences among the job's agents need all of them launched here, rank 0 first
            // (a job launched in parts keeps fencing at the master).
            let whole = orders.first().is_some_and(|(_, _, o)| o.rank == 0)
                && orders.len() == orders[0].2.size as usize;
            let fence_width = if whole { fanout.fence_width() } else { 0 };
            if fanout.relays(orders.len()) {
                relays::launch_job(agents, metrics, tx, &self.cluster_id, orders, fence_width);
            } else {
                metrics.direct_calls("launch", orders.len());
                // Flat: every rank's fence parent is rank 0 (`gang_core::tree::fanout::links`).
                let root = orders
                    .first()
                    .map(|(_, a, _)| a.clone())
                    .unwrap_or_default();
                for (node, address, order) in orders {
                    let parent = if order.rank == 0 {
                        String::new()
                    } else {
                        root.clone()
                    };
                    calls::launch(
                        agents,
                        tx,
                        (node, &address),
                        &self.cluster_id,
                        order,
                        (fence_width, parent),
                    );
                }
            }
        }
        for ((job, grace_ms), targets) in signals {
            if fanout.relays(targets.len()) {
                relays::signal_job(agents, metrics, job, grace_ms, &targets);
            } else {
                metrics.direct_calls("signal", targets.len());
                for (node, address) in targets {
                    calls::signal(agents, node, &address, job, grace_ms);
                }
            }
        }
        self.send_tables(tables);
    }

    /// A round's slice tables: down the order tree when many, else one call each.
    fn send_tables(&self, tables: Vec<(Coord, String, NodeTable)>) {
        let (agents, tx, metrics) = (&self.agents, &self.handle.tx, &self.metrics);
        if agents.fanout.relays(tables.len()) {
            relays::tables(agents, metrics, tx, tables);
        } else if !tables.is_empty() {
            metrics.direct_calls("tables", tables.len());
            for (node, address, table) in tables {
                calls::set_table(agents, tx, node, &address, table);
            }
        }
    }

    fn count(&self, m: Metric) {
        let mx = &self.metrics;
        match m {
            Metric::Submitted => {
                mx.jobs_submitted.inc();
            }
            Metric::Finished(state) => mx.finished(state),
            Metric::Launched(s) => mx.launch_seconds.observe(s),
            Metric::TableVersion(v) => {
                mx.table_version.set(v as i64);
            }
            Metric::Deadlocked => {
                mx.jobs_deadlocked.inc();
            }
        }
    }

    /// A job ended (or began to): its ranks waiting in a fence hear so.
    fn end_fences(&mut self, job: JobId) {
        let keys: Vec<_> = self.fences.keys().filter(|k| k.0 == job).copied().collect();
        for k in keys {
            for tx in self.fences.remove(&k).unwrap_or_default() {
                let _ = tx.send(Err(MasterError::NotRunning {
                    job,
                    state: "ending",
                }));
            }
        }
    }
}
