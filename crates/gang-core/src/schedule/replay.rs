//! Replaying a workload through the scheduler in virtual time.
//!
//! Events are arrivals (from the workload) and completions (a job ends when its full-speed
//! work reaches its run time; under time sharing that takes longer than the run time).
//! Between events every rate is constant, so the next completion is computed exactly.

use serde::Serialize;

use crate::mesh::{Shape, Submesh};
use crate::plan::{Decision, JobId, Plan, SliceId};
use crate::schedule::{JobSpec, SchedError, Scheduler};

/// One job of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadJob {
    pub id: JobId,
    pub submit: f64,
    pub shape: Shape,
    /// Seconds it runs at full speed.
    pub runtime: f64,
    /// Requested run time, for backfilling.
    pub estimate: Option<f64>,
}

/// What happened to one job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    pub job: JobId,
    pub submit: f64,
    pub start: f64,
    pub end: f64,
}

/// One stretch of time during which a job held a slot: `[start, end)` in `slice`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub job: JobId,
    pub slice: SliceId,
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    pub start: f64,
    pub end: f64,
}

/// Turns the plans of a run into closed placement intervals.
#[derive(Debug, Default)]
pub struct IntervalTracker {
    open: Vec<(JobId, SliceId, Submesh, f64)>,
    submesh: std::collections::HashMap<JobId, Submesh>,
}

impl IntervalTracker {
    /// Feed one plan; `emit` receives every interval the plan closes.
    pub fn apply(&mut self, plan: &Plan, mut emit: impl FnMut(Interval)) {
        let now = plan.now;
        let mut close = |open: &mut Vec<(JobId, SliceId, Submesh, f64)>,
                         pred: &dyn Fn(JobId, SliceId) -> bool| {
            open.retain(|&(j, s, sm, start)| {
                if pred(j, s) {
                    emit(Interval {
                        job: j,
                        slice: s,
                        x: sm.x,
                        y: sm.y,
                        w: sm.w,
                        h: sm.h,
                        start,
                        end: now,
                    });
                    false
                } else {
                    true
                }
            });
        };
        for d in &plan.decisions {
            match *d {
                Decision::Start {
                    job,
                    slice,
                    submesh,
                } => {
                    self.submesh.insert(job, submesh);
                    self.open.push((job, slice, submesh, now));
                }
                Decision::AddSlot { job, slice } => {
                    let sm = self.submesh[&job];
                    self.open.push((job, slice, sm, now));
                }
                Decision::RemoveSlot { job, slice } => {
                    close(&mut self.open, &|j, s| j == job && s == slice)
                }
                Decision::Free { job, .. } => {
                    self.submesh.remove(&job);
                    close(&mut self.open, &|j, _| j == job);
                }
                Decision::NewSlice { .. }
                | Decision::DropSlice { .. }
                | Decision::Reserve { .. } => {}
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Replay `jobs` (in any order; they are taken by submit time, then by order given).
/// `observe` sees the scheduler and the plan after every step (tests check invariants
/// there). Returns one outcome per job, in completion order.
pub fn replay(
    sched: &mut Scheduler,
    jobs: &[WorkloadJob],
    mut observe: impl FnMut(&Scheduler, &Plan),
) -> Result<Vec<Outcome>, SchedError> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].submit.total_cmp(&jobs[b].submit));
    let by_id: std::collections::HashMap<JobId, &WorkloadJob> =
        jobs.iter().map(|j| (j.id, j)).collect();
    let mut outcomes = Vec::with_capacity(jobs.len());
    let mut next = 0;
    loop {
        let arrival = order.get(next).map(|&i| jobs[i].submit);
        let now = sched.now();
        let completion = sched
            .matrix()
            .placements()
            .map(|(id, _)| {
                let left = (by_id[&id].runtime - sched.work_done(id).unwrap_or(0.0)).max(0.0);
                let rate = sched.rate(id).unwrap_or(1.0);
                (if left == 0.0 { now } else { now + left / rate }, id)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let take_arrival = match (arrival, completion) {
            (None, None) => break,
            (Some(t), Some((ct, _))) => t < ct,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let plan = if take_arrival {
            let j = &jobs[order[next]];
            next += 1;
            let spec = JobSpec {
                id: j.id,
                shape: j.shape,
                estimate: j.estimate,
                user: 0,
            };
            sched.submit(j.submit.max(now), spec)?
        } else {
            let (t, id) = completion.expect("no arrival taken, so a completion exists");
            let start = sched.started_at(id).expect("running");
            let j = by_id[&id];
            let plan = sched.finish(t.max(now), id)?;
            outcomes.push(Outcome {
                job: id,
                submit: j.submit,
                start,
                end: plan.now,
            });
            plan
        };
        observe(sched, &plan);
    }
    Ok(outcomes)
}
