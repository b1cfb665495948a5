//! A job placed by the scheduler: its ranks launched on its rectangle, and running once
//! every rank reported it.
//!
//! Ranks: Pending (launch sent) -> Running -> Exited(code) or Gone (could not start, node
//! lost).

use std::sync::Arc;

use gang_core::{Decision, JobId, Plan, Submesh};

use crate::job::{Rank, Spec, State};
use crate::state::effects::{Effect, Effects, LaunchOrder, Metric};
use crate::state::events::LaunchFailure;
use crate::state::{MasterState, Now, Placed};

impl MasterState {
    /// Carry out a plan of the core: agents learn of slots through slice tables, so only
    /// starts need work here.
    pub(in crate::state) fn execute(&mut self, fx: &mut Effects, now: Now, plan: Plan) {
        for d in plan.decisions {
            if let Decision::Start { job, submesh, .. } = d {
                self.launch(fx, now, job, submesh);
            }
        }
    }

    pub(in crate::state) fn launch(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        submesh: Submesh,
    ) {
        let Some(job) = self
            .jobs
            .get_mut(id)
            .filter(|j| !j.record.state().is_final())
        else {
            return;
        };
        crate::state::transition(fx, &mut job.record, State::Starting);
        job.record.submesh = Some(submesh);
        job.record.start_ns = now.wall_ns;
        job.run_accounted_to = now.wall_ns;
        job.ranks = vec![Rank::Pending; job.rank_count() as usize].into();
        self.placed_at.insert(
            id,
            Placed {
                mono_ns: now.mono_ns,
                live_ns: now.live_ns,
            },
        );
        let job = self.jobs.get(id).expect("present");
        let part = job
            .record
            .submesh
            .expect("a job being launched has its submesh");
        let (first, others) = match job.record.array {
            Some(a) => rank_specs(&a.task_spec(&job.record.spec)),
            None => rank_specs(&job.record.spec),
        };
        let mut down = vec![];
        let size = job.rank_count();
        for rank in 0..size {
            let (x, y) = job.node_of(rank).expect("placed");
            let node = &self.nodes[(y * self.cfg.mesh.w + x) as usize];
            let Some(addr) = node.address.as_deref().filter(|_| node.up) else {
                down.push((rank, x, y));
                continue;
            };
            let order = LaunchOrder {
                job: id,
                rank,
                size,
                part,
                spec: if rank == 0 { &first } else { &others }.clone(),
            };
            fx.emit(Effect::Launch {
                node: (x, y),
                address: addr.to_string(),
                order,
            });
        }
        self.save(fx, now, id);
        for (rank, x, y) in down {
            self.rank_gone(fx, now, id, rank, format!("node ({x},{y}) is down"));
        }
        if size == 0 {
            // An allocation without a batch script: running once placed.
            self.note_started(fx, now, id);
        }
    }

    /// A rank's launch was confirmed (or its agent listed it): Pending becomes Running.
    pub(in crate::state) fn rank_running(&mut self, fx: &mut Effects, id: JobId, rank: u32) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let Some(slot) = job.ranks.get_mut(rank as usize) else {
            return;
        };
        if *slot != Rank::Pending {
            return;
        }
        *slot = Rank::Running;
        if rank == 0
            && let Some(node) = job.node_of(0)
            && let Some(addr) = self
                .node_index(node)
                .and_then(|i| self.nodes[i].address.as_deref())
        {
            fx.emit(Effect::Rank0Running {
                job: id,
                node,
                address: addr.to_string(),
            });
        }
    }

    /// Every rank has started (it runs, or already ran to its end): the job is running.
    pub(in crate::state) fn note_started(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        // The cheap tests first: this is asked at every exit, and a running job's ranks
        // are not walked again.
        if job.record.state() != State::Starting
            || job.failure.is_some()
            || job.cancelled.is_some()
            || !job
                .ranks
                .iter()
                .all(|r| matches!(r, Rank::Running | Rank::Exited(_)))
        {
            return;
        }
        let job = self.jobs.get_mut(id).expect("present");
        crate::state::transition(fx, &mut job.record, State::Running);
        if let Some(t) = self.placed_at.remove(&id) {
            fx.emit(Effect::Metric(Metric::Launched(
                (now.mono_ns - t.mono_ns) as f64 / 1e9,
            )));
        }
        self.save(fx, now, id);
    }

    /// A rank's launch answered: it runs, or it is gone. Whether the job now runs is
    /// `note_started`'s, asked once for a batch of answers (it walks every rank).
    pub(in crate::state) fn launched(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        rank: u32,
        result: &std::result::Result<u32, LaunchFailure>,
    ) {
        let Some(job) = self.jobs.get(id).filter(|j| !j.record.state().is_final()) else {
            return;
        };
        let Some(&slot) = job.ranks.get(rank as usize) else {
            return;
        };
        match result {
            Ok(_pid) if slot == Rank::Pending => {
                self.rank_running(fx, id, rank);
                let job = self.jobs.get(id).expect("present");
                if job.failure.is_some() || job.cancelled.is_some() {
                    // Started after the job was already being torn down.
                    if let Some(node) = job.node_of(rank) {
                        self.signal_node(fx, id, node, 0);
                    }
                }
            }
            Ok(_) => {}
            Err(failure) => self.rank_gone(fx, now, id, rank, failure.to_string()),
        }
    }
}

/// A job's spec as its ranks get it, rank 0's and the others': without the submitter's
/// `GANG_MASTER` (its own master address means nothing to a rank), and stdin forwarded to
/// rank 0 alone, if the job asked for it.
fn rank_specs(spec: &Spec) -> (Arc<Spec>, Arc<Spec>) {
    let mut others = spec.clone();
    others.env.remove("GANG_MASTER");
    others.stdin = false;
    let others = Arc::new(others);
    // A batch script keeps it: prun in it starts steps through the same master.
    if spec.allocate {
        return (Arc::new(Spec::clone(spec)), others);
    }
    let first = if spec.stdin {
        Arc::new(Spec {
            stdin: true,
            ..Spec::clone(&others)
        })
    } else {
        others.clone()
    };
    (first, others)
}
