//! What the daemon does with a saved batch's effects (its saves are already committed, by
//! `Store`'s `Commit`): calls to agents, announcements, fence answers and metrics.

use gang_core::JobId;

use crate::actor::{Actor, calls};
use crate::error::MasterError;
use crate::state::effects::{Effect, Metric};

impl Actor {
    /// What a saved batch sends out.
    pub(super) fn carry_out(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Save(_) => {} // committed with the batch
                Effect::Launch {
                    node,
                    address,
                    order,
                } => calls::launch(
                    &self.agents,
                    &self.handle.tx,
                    node,
                    &address,
                    &self.cluster_id,
                    order,
                ),
                Effect::Signal {
                    node,
                    address,
                    job,
                    grace_ms,
                } => calls::signal(&self.agents, node, &address, job, grace_ms),
                Effect::Table {
                    node,
                    address,
                    table,
                } => calls::set_table(&self.agents, &self.handle.tx, node, &address, table),
                Effect::JobChanged(view) => {
                    if view.state.is_final() {
                        self.end_fences(view.id);
                    }
                    let _ = self.handle.events.send(view);
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
