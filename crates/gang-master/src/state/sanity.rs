//! The master's sanity check, run after every round in debug builds and after every step
//! of the reactor's tests: the core's own invariants, plus the job table, the node table and
//! the slice matrix agreeing with one another.

use std::collections::BTreeSet;

use gang_core::JobId;

use crate::job::State;
use crate::state::MasterState;

impl MasterState {
    /// Each user's queued jobs and bytes, counted again from the jobs, are what was kept.
    fn check_queued_counts(&self) -> Result<(), String> {
        use std::collections::{BTreeMap, HashSet};
        let mut counted: BTreeMap<u32, (usize, u64, HashSet<usize>)> = BTreeMap::new();
        for job in self.jobs.live() {
            let queued = job.record.state() == State::Queued;
            if queued != job.charged {
                return Err(format!(
                    "job {} is {:?} but charged={}",
                    job.id(),
                    job.record.state(),
                    job.charged
                ));
            }
            if !queued {
                continue;
            }
            let c = counted.entry(job.record.owner.uid).or_default();
            c.0 += 1;
            if c.2
                .insert(std::sync::Arc::as_ptr(&job.record.spec) as usize)
            {
                c.1 += crate::state::records::queued::spec_bytes(&job.record.spec);
            }
        }
        let kept: BTreeMap<u32, (usize, u64)> =
            self.queued.users().map(|(u, j, b)| (u, (j, b))).collect();
        let found: BTreeMap<u32, (usize, u64)> = counted
            .into_iter()
            .map(|(u, (j, b, _))| (u, (j, b)))
            .collect();
        if kept != found {
            return Err(format!(
                "queued jobs and bytes per user kept {kept:?}, counted from the jobs {found:?}"
            ));
        }
        Ok(())
    }

    /// What was kept between rounds is what the jobs say now, and no gated job whose gate
    /// opened (or can never open) is forgotten: each is marked to be looked at again.
    fn check_gates_looked_at(&self) -> Result<(), String> {
        self.check_summaries()?;
        let mut cache = Default::default();
        for &id in &self.gated {
            let Some(job) = self.jobs.get(id) else {
                return Err(format!("gated job {id} is not in the job table"));
            };
            let gate = self.gate(job, &mut cache);
            let stuck = matches!(gate, None | Some(crate::state::policy::Gate::Never(..)));
            if stuck && !self.gates.dirty.contains(&id) {
                return Err(format!(
                    "gated job {id} may move ({gate:?}) but nothing will look at it again"
                ));
            }
        }
        Ok(())
    }

    /// `Err` names the first disagreement found.
    pub fn sanity_check(&self) -> Result<(), String> {
        self.sched.check_invariants()?;
        self.check_nodes()?;
        if !self.jobs.live_index_holds() {
            return Err("a job not ended is missing from the live set".into());
        }
        self.check_queued_counts()?;
        self.check_gates_looked_at()?;
        let queued: BTreeSet<JobId> = self.sched.queue().map(|q| q.id).collect();
        let placed: BTreeSet<JobId> = self.sched.matrix().placements().map(|(j, _)| j).collect();
        for job in self.jobs.values() {
            self.check_job(job, &queued, &placed)?;
        }
        self.check_core_jobs(&queued, &placed)
    }

    /// The node table is the mesh, and the core has offline exactly the nodes down or
    /// drained.
    fn check_nodes(&self) -> Result<(), String> {
        let mesh = self.cfg.mesh;
        if self.nodes.len() != mesh.area() as usize {
            return Err(format!(
                "{} nodes in the node table for a {mesh} mesh",
                self.nodes.len()
            ));
        }
        let offline = self.sched.matrix().offline();
        for (i, n) in self.nodes.iter().enumerate() {
            let (x, y) = self.coord(i);
            let should = !n.up || n.drained;
            if offline.is_busy(x, y) != should {
                return Err(format!(
                    "node ({x},{y}) is up={} drained={} but the core has it {}",
                    n.up,
                    n.drained,
                    if should { "online" } else { "offline" }
                ));
            }
        }
        Ok(())
    }

    /// One job is where its state says: queued in the core or gated (exactly one), placed
    /// where the matrix has it, or out of the core once ended; a step never in the core.
    fn check_job(
        &self,
        job: &crate::job::Job,
        queued: &BTreeSet<JobId>,
        placed: &BTreeSet<JobId>,
    ) -> Result<(), String> {
        let id = job.id();
        let r = &job.record;
        if id.0 >= self.next_id {
            return Err(format!(
                "job {id} is not below the next id {}",
                self.next_id
            ));
        }
        let (in_queue, in_matrix) = (queued.contains(&id), placed.contains(&id));
        let gated = self.gated.contains(&id);
        if let Some(alloc) = r.allocation {
            if in_queue || in_matrix || gated {
                return Err(format!(
                    "step {id} of {alloc} is in the core's queue {in_queue}, matrix \
                         {in_matrix}, gated {gated}: steps never meet the core"
                ));
            }
            return self.check_step(job, alloc);
        }
        match r.state() {
            // Either the core has it, or a gate keeps it out (held, dependency, array
            // limit): exactly one.
            State::Queued if in_queue == gated || in_matrix => {
                return Err(format!(
                    "queued job {id}: in the core's queue {in_queue}, gated {gated}, \
                     placed {in_matrix}"
                ));
            }
            State::Queued
                if gated
                    && r.hold.is_none()
                    && r.dependency.is_empty()
                    && r.array.is_none_or(|a| a.throttle == 0) =>
            {
                return Err(format!("job {id} is gated with nothing to wait for"));
            }
            State::Starting | State::Running => {
                let p = self
                    .sched
                    .matrix()
                    .placement(id)
                    .ok_or_else(|| format!("{:?} job {id} is not in the matrix", r.state()))?;
                if r.submesh != Some(p.submesh) {
                    return Err(format!(
                        "job {id} runs on {:?} but the matrix places it on {}",
                        r.submesh, p.submesh
                    ));
                }
                if in_queue {
                    return Err(format!("running job {id} is also queued"));
                }
                if job.ranks.len() != job.rank_count() as usize {
                    return Err(format!(
                        "job {id} has {} rank states for {} ranks",
                        job.ranks.len(),
                        job.rank_count()
                    ));
                }
                if r.allocate {
                    if job.allocation_over() && self.live_steps(id) == 0 {
                        return Err(format!(
                            "allocation {id} is over, with no step left, but has not ended"
                        ));
                    }
                } else if job.all_ranks_done() {
                    return Err(format!("job {id} has no rank left but has not ended"));
                }
            }
            s if s != State::Queued && gated => {
                return Err(format!("{s:?} job {id} is still gated"));
            }
            s if s.is_final() && (in_queue || in_matrix) => {
                return Err(format!("ended job {id} still holds its place in the core"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Everything the core or the timers know of is in the job table, and placed.
    fn check_core_jobs(
        &self,
        queued: &BTreeSet<JobId>,
        placed: &BTreeSet<JobId>,
    ) -> Result<(), String> {
        if let Some(id) = queued
            .iter()
            .chain(placed)
            .find(|&&id| !self.jobs.contains(id))
        {
            return Err(format!("the core knows job {id}, the job table does not"));
        }
        for id in self.adopted.keys().chain(self.placed_at.keys()) {
            let placed_step = self
                .jobs
                .get(*id)
                .is_some_and(|j| j.record.allocation.is_some() && j.record.state().is_placed());
            if !placed.contains(id) && !placed_step {
                return Err(format!("job {id} is awaited but not placed"));
            }
        }
        Ok(())
    }

    /// A step lives only inside its placed allocation, and placed steps of one allocation
    /// do not overlap.
    fn check_step(&self, job: &crate::job::Job, alloc: JobId) -> Result<(), String> {
        let id = job.id();
        let r = &job.record;
        if r.state().is_final() {
            return Ok(());
        }
        let a = self
            .jobs
            .get(alloc)
            .ok_or_else(|| format!("step {id}: there is no allocation {alloc}"))?;
        if !a.record.allocate || !a.record.state().is_placed() {
            return Err(format!(
                "live step {id} of {alloc}, which is {:?} (an allocation: {})",
                a.record.state(),
                a.record.allocate
            ));
        }
        if !r.state().is_placed() {
            return Ok(());
        }
        let (Some(sm), Some(area)) = (r.submesh, a.record.submesh) else {
            return Err(format!("placed step {id} or its allocation has no submesh"));
        };
        let inside = sm.x >= area.x
            && sm.y >= area.y
            && sm.x + sm.w <= area.x + area.w
            && sm.y + sm.h <= area.y + area.h;
        if !inside {
            return Err(format!(
                "step {id} runs on {sm}, outside allocation {alloc} on {area}"
            ));
        }
        if job.ranks.len() != job.size() as usize {
            return Err(format!(
                "step {id} has {} rank states for {} ranks",
                job.ranks.len(),
                job.size()
            ));
        }
        if job.all_ranks_done() {
            return Err(format!("step {id} has no rank left but has not ended"));
        }
        for &other in self.jobs.steps_of(alloc) {
            let Some(o) = self
                .jobs
                .get(other)
                .filter(|o| other != id && o.record.state().is_placed())
            else {
                continue;
            };
            if o.record.submesh.is_some_and(|osm| osm.overlaps(sm)) {
                return Err(format!(
                    "steps {id} and {other} of allocation {alloc} overlap"
                ));
            }
        }
        Ok(())
    }
}
