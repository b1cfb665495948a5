//! Allocations and their steps (`gangctl alloc`, `gangctl submit`, prun inside them).
//!
//! An allocation is placed, switched and timed as one job; its nodes run its batch script
//! (one rank, on its first node) if it has one, and the steps its owner starts in it. A step
//! is a job of its own (id, ranks, output, accounting) that never meets the scheduler's
//! queue or matrix: it takes free nodes of its allocation's rectangle at once
//! (`gang_core::schedule::steps::place`), or waits for them in submission order, and runs in its
//! allocation's slots (its ranks' agents switch it with the allocation).
//!
//! Invariants (checked by `sanity`): a step's allocation is placed while the step is live;
//! placed steps lie inside their allocation's rectangle and do not overlap one another; an
//! allocation ends only after all its steps have.

use std::sync::Arc;

use gang_core::{JobId, Request, Submesh};

use crate::error::{MasterError, Result};
use crate::job::{Job, JobRecord, State};
use crate::state::effects::{Effect, Effects, Metric};
use crate::state::events::{Caller, NewJob};
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

impl MasterState {
    /// Steps of `alloc` that have not ended.
    pub(in crate::state) fn live_steps(&self, alloc: JobId) -> usize {
        self.jobs
            .steps_of(alloc)
            .iter()
            .filter(|&&s| {
                self.jobs
                    .get(s)
                    .is_some_and(|j| !j.record.state().is_final())
            })
            .count()
    }

    /// Where `alloc`'s placed steps run.
    fn busy_in(&self, alloc: JobId) -> Vec<(JobId, Submesh)> {
        self.jobs
            .steps_of(alloc)
            .iter()
            .filter_map(|&s| self.jobs.get(s))
            .filter(|j| j.record.state().is_placed())
            .filter_map(|j| j.record.submesh.map(|sm| (j.id(), sm)))
            .collect()
    }

    /// The allocation a step may be started in: the caller's, placed, not ending.
    fn step_target(&self, new: &NewJob, alloc: JobId) -> Result<&Job> {
        let a = self.jobs.get(alloc).ok_or_else(|| {
            MasterError::Invalid(format!("spec.allocation: there is no allocation {alloc}"))
        })?;
        if a.record.owner.uid != new.owner.uid {
            return Err(MasterError::NotOwner {
                job: alloc,
                owner: a.record.owner.user.clone(),
                caller: new.owner.user.clone(),
                action: "start a step in",
            });
        }
        if !a.record.allocate {
            return Err(MasterError::Invalid(format!(
                "job {alloc} is not an allocation (`gangctl alloc` and `gangctl submit` make \
                 them); unset GANG_ALLOCATION_ID to submit a job of its own"
            )));
        }
        if !a.record.state().is_placed() || a.allocation_over() {
            let state = a.record.state().word();
            let state = if a.record.state().is_placed() {
                "ending"
            } else {
                state
            };
            return Err(MasterError::NotRunning { job: alloc, state });
        }
        let refuse = |what: &str| {
            Err(MasterError::Invalid(format!(
                "a step of allocation {alloc} cannot {what}"
            )))
        };
        if new.at_submit.array.is_some() {
            return refuse("be an array (submit the array as jobs of their own)");
        }
        if !new.dependency.is_empty() || new.at_submit.hold {
            return refuse("wait on dependencies or a hold: it starts in the allocation at once");
        }
        if new.allocate {
            return refuse("be an allocation itself");
        }
        Ok(a)
    }

    /// A step: checked against its allocation, then placed on its free nodes or left to
    /// wait for them. Durable in the round, as any submission.
    pub(in crate::state) fn submit_step(
        &mut self,
        fx: &mut Effects,
        now: Now,
        mut new: NewJob,
    ) -> Result<JobView> {
        let alloc = new.allocation.expect("a step");
        let a = self.step_target(&new, alloc)?;
        let area = a
            .record
            .submesh
            .expect("a placed allocation has its submesh");
        // No shape: the whole allocation (srun's default inside one).
        let shape = if new.shape.trim().is_empty() {
            new.shape = area.shape().to_string();
            area.shape()
        } else {
            let request = new.shape.parse::<Request>()?;
            gang_core::schedule::steps::resolve(request, alloc.0, area.shape())
                .map_err(|e| MasterError::Invalid(e.to_string()))?
        };
        // Switched as its allocation is: the agents switch it in the allocation's slots.
        new.gang = Some(a.record.gang);
        let number = self.jobs.steps_of(alloc).len() as u32;
        // What every job is checked for (command, environment, sizes), on the allocation's
        // rectangle rather than the mesh.
        self.validate_command(&new)?;
        // Steps wait queued like jobs, and count as theirs.
        self.check_queue_room(
            &new.owner,
            1,
            crate::state::records::queued::spec_bytes(&new),
        )?;
        let spec = new.resolve(self.defaults());
        let id = JobId(self.next_id);
        self.next_id += 1;
        let mut record = JobRecord::queued(id, Arc::new(spec), shape.w, shape.h, now.wall_ns);
        record.step = Some(number);
        self.jobs.insert(Job::new(record));
        fx.emit(Effect::Metric(Metric::Submitted));
        self.save(fx, now, id);
        self.admit_steps(fx, now, alloc);
        self.view(id, now)
    }

    /// Start `alloc`'s waiting steps, oldest first, while its free nodes hold them.
    pub(in crate::state) fn admit_steps(&mut self, fx: &mut Effects, now: Now, alloc: JobId) {
        let Some(area) = self
            .jobs
            .get(alloc)
            .filter(|a| a.record.state().is_placed() && !a.allocation_over())
            .and_then(|a| a.record.submesh)
        else {
            return;
        };
        let waiting: Vec<JobId> = self
            .jobs
            .steps_of(alloc)
            .iter()
            .copied()
            .filter(|&s| {
                self.jobs
                    .get(s)
                    .is_some_and(|j| j.record.state() == State::Queued)
            })
            .collect();
        // A node that is down takes no step (after a master restart, none until its agent
        // registers again).
        let down: Vec<Submesh> = area
            .nodes()
            .filter(|&n| self.node_index(n).is_none_or(|i| !self.nodes[i].up))
            .map(|(x, y)| Submesh::new(x, y, 1, 1))
            .collect();
        for step in waiting {
            let mut busy: Vec<Submesh> = self.busy_in(alloc).into_iter().map(|b| b.1).collect();
            busy.extend(&down);
            let shape = self.jobs.get(step).map(|j| j.size_shape()).expect("listed");
            // In order: a later step does not pass one that waits for more nodes.
            let Some(at) = gang_core::schedule::steps::place(area, &busy, shape) else {
                return;
            };
            if let Some(j) = self.jobs.get_mut(step) {
                j.record.w = at.w;
                j.record.h = at.h;
            }
            self.launch(fx, now, step, at);
        }
    }

    /// Start waiting steps wherever their allocation has room: after each round, for the
    /// steps a master restart found waiting (the others are started when they come, or
    /// when a step ends).
    pub(in crate::state) fn admit_waiting_steps(&mut self, fx: &mut Effects, now: Now) {
        let allocs: Vec<JobId> = self
            .sched
            .matrix()
            .placements()
            .map(|(id, _)| id)
            .filter(|&id| {
                self.jobs.steps_of(id).iter().any(|&s| {
                    self.jobs
                        .get(s)
                        .is_some_and(|j| j.record.state() == State::Queued)
                })
            })
            .collect();
        for a in allocs {
            self.admit_steps(fx, now, a);
        }
    }

    /// The allocation is over: its waiting steps end without running, its running ones are
    /// stopped (each ends once its ranks have).
    pub(in crate::state) fn end_steps(&mut self, fx: &mut Effects, now: Now, alloc: JobId) {
        let why = format!("allocation {alloc} ended");
        let steps: Vec<JobId> = self.jobs.steps_of(alloc).to_vec();
        for s in steps {
            let Some(j) = self.jobs.get(s) else {
                continue;
            };
            match j.record.state() {
                State::Queued => self.end_unplaced(fx, now, s, why.clone()),
                State::Starting | State::Running if j.cancelled.is_none() => {
                    let _ = self.cancel(fx, now, s, None, why.clone());
                }
                _ => {}
            }
        }
    }

    /// Why a waiting step waits.
    pub(in crate::state) fn step_pending_text(&self, job: &Job) -> String {
        let alloc = job.slot_job();
        let busy: Vec<String> = self
            .busy_in(alloc)
            .iter()
            .map(|(id, sm)| format!("{id} on {sm}"))
            .collect();
        if busy.is_empty() {
            format!("allocation {alloc} is starting its next step")
        } else {
            format!(
                "allocation {alloc}'s nodes are busy with step{} {}",
                if busy.len() == 1 { "" } else { "s" },
                busy.join(", ")
            )
        }
    }

    /// `EndAllocation`: the allocation's command (on the client: `gangctl alloc`) exited.
    pub(in crate::state) fn end_allocation(
        &mut self,
        fx: &mut Effects,
        now: Now,
        caller: &Caller,
        id: JobId,
        code: i32,
    ) -> Result<JobView> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        self.check_access(caller, job, "end")?;
        if !job.record.allocate || !job.record.argv.is_empty() {
            return Err(MasterError::Invalid(format!(
                "job {id} is not an allocation without a batch script: it ends with its \
                 {}; `gangctl cancel {id}` stops it",
                if job.record.allocate {
                    "script"
                } else {
                    "ranks"
                }
            )));
        }
        let state = job.record.state();
        if state.is_final() {
            return Err(MasterError::AlreadyEnded {
                job: id,
                state: state.word(),
            });
        }
        if state == State::Queued {
            // Never granted: it goes as a cancel would.
            let why = format!("ended by {} before it was granted", caller.owner.user);
            return self.cancel(fx, now, id, Some(caller), why);
        }
        if job.ended_with.is_none() && job.cancelled.is_none() {
            let run = self.run_ns(job, now.wall_ns);
            let job = self.jobs.get_mut(id).expect("present");
            job.record.run_ns = run;
            job.run_accounted_to = now.wall_ns;
            job.ended_with = Some(code);
            self.save(fx, now, id);
            self.maybe_finish(fx, now, id);
        }
        self.view(id, now)
    }
}

impl Job {
    /// The shape a job asked, as resolved at submission.
    pub fn size_shape(&self) -> gang_core::Shape {
        gang_core::Shape::new(self.record.w, self.record.h)
    }
}
