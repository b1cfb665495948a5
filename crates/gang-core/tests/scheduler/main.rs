//! Scheduler behaviour: slices, multiple tasks, MPL, backfilling, progress. Every step
//! is followed by the full invariant check. The harness is here; the cases by what they
//! test: `slices` (placement, MPL, multiple tasks, progress, backfilling, requests),
//! `nodes` (offline nodes, adoption, why a job waits, fair share), `properties` (random
//! workloads and operations).

mod nodes;
mod properties;
mod slices;

use std::collections::HashMap;

use gang_core::*;
use proptest::prelude::*;

fn s(w: u32, h: u32) -> Shape {
    Shape::new(w, h)
}

struct Harness {
    sched: Scheduler,
    now: f64,
}

impl Harness {
    fn new(mesh: Shape, cfg: Config) -> Self {
        Harness {
            sched: Scheduler::new(mesh, cfg).unwrap(),
            now: 0.0,
        }
    }

    fn submit(&mut self, id: u64, shape: Shape, estimate: Option<f64>) -> Plan {
        let plan = self
            .sched
            .submit(
                self.now,
                JobSpec {
                    id: JobId(id),
                    shape,
                    estimate,
                    user: 0,
                },
            )
            .unwrap();
        self.sched.check_invariants().unwrap();
        plan
    }

    fn finish(&mut self, id: u64) -> Plan {
        let plan = self.sched.finish(self.now, JobId(id)).unwrap();
        self.sched.check_invariants().unwrap();
        plan
    }

    fn slices(&self) -> Vec<SliceId> {
        self.sched.matrix().slices().iter().map(|s| s.id).collect()
    }

    fn placement(&self, id: u64) -> Placement {
        self.sched.matrix().placement(JobId(id)).cloned().unwrap()
    }
}

fn start(job: u64, slice: u32, x: u32, y: u32, w: u32, h: u32) -> Decision {
    Decision::Start {
        job: JobId(job),
        slice: SliceId(slice),
        submesh: Submesh::new(x, y, w, h),
    }
}

fn started_by(plan: &Plan) -> Vec<u64> {
    plan.decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Start { job, .. } => Some(job.0),
            _ => None,
        })
        .collect()
}
