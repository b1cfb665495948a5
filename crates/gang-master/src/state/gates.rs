//! Queued jobs kept out of the scheduler's queue: held (`gangctl hold`), waiting on their
//! dependencies (`afterok:12`), or throttled by their array's limit (`--array 1-100%10`).
//!
//! A queued job is either in the core's queue or in `gated`, never both (the sanity check
//! says so). After every round, [`MasterState::admit_ready`] queues the jobs whose gate
//! opened and ends those whose dependency can never hold, until nothing changes: an ended
//! job may open or close the gates of others.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use gang_core::dependency::{self, Dep, Upstream, Verdict};
use gang_core::{JobId, JobSpec, Shape};

use crate::error::{MasterError, Result};
use crate::job::{Hold, Job, State};
use crate::state::effects::Effects;
use crate::state::events::{Caller, JobUpdate};
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

/// Gated jobs looked at in one round at most: a round's cost stays bounded however many
/// wait; the others are looked at in the next rounds (a tick comes every 100 ms).
const ADMIT_PER_ROUND: usize = 2048;

/// What gates are judged from, kept between rounds so that a round looks only at what
/// changed: who waits on what (an id a dependency names: a job, or an array's first task),
/// which gated jobs to look at again, and what the jobs each named id stands for are now.
#[derive(Debug, Default)]
pub(super) struct GateIndex {
    /// Jobs whose dependencies name each id. Never taken back with a round (a job that
    /// never was only costs a look), and pruned as it is read.
    dependents: HashMap<u64, Vec<JobId>>,
    /// Gated jobs to look at again: something they wait on changed, or they are new.
    pub(super) dirty: BTreeSet<JobId>,
    /// The distinct states of the jobs each named id stands for, until one of them changes
    /// (filled by readers: views find them too; only the state task takes the lock).
    summaries: Mutex<HashMap<u64, Named>>,
}

impl GateIndex {
    /// `job` waits on `deps`: their changes are its to look at.
    pub(super) fn wait_on(&mut self, job: JobId, deps: &[Dep]) {
        for d in deps {
            let v = self.dependents.entry(d.job).or_default();
            if !v.contains(&job) {
                v.push(job);
            }
        }
        self.dirty.insert(job);
    }

    /// A round was taken back: what was found from its changes may be wrong.
    pub(super) fn forget_summaries(&self) {
        self.summaries().clear();
    }

    fn summaries(&self) -> MutexGuard<'_, HashMap<u64, Named>> {
        self.summaries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a queued job is kept out of the core's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gate {
    Held(Hold),
    Dependency(Dep),
    /// Its array has this many tasks queued for nodes or running: its limit.
    Throttled {
        array: JobId,
        limit: u32,
    },
    /// A dependency that can never hold: the job ends.
    Never(Dep, Upstream),
}

/// What the jobs an id named by dependencies stands for are now: all a verdict needs (their
/// distinct states), and what a pending reason says of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Named {
    classes: Vec<Upstream>,
    /// Jobs it stands for (an array's tasks), and how many of them ended.
    total: u32,
    ended: u32,
    /// The job's state, when it stands for one job.
    single: Option<State>,
}

fn upstream_of(state: State) -> Upstream {
    match state {
        State::Queued => Upstream::Waiting,
        State::Starting | State::Running => Upstream::Started,
        State::Completed => Upstream::Ended { ok: true },
        State::Failed | State::Cancelled | State::Timeout => Upstream::Ended { ok: false },
    }
}

impl MasterState {
    /// The jobs a dependency on `id` waits for: the job, or every task of the array `id`
    /// names (an array's id is its first task's).
    fn dependency_targets(&self, id: u64) -> Vec<&Job> {
        let Some(first) = self.jobs.get(JobId(id)) else {
            return Vec::new();
        };
        match first.record.array {
            Some(a) if a.job == first.id() => (id..)
                .map_while(|i| {
                    self.jobs
                        .get(JobId(i))
                        .filter(|j| j.record.array.is_some_and(|t| t.job == a.job))
                })
                .collect(),
            _ => vec![first],
        }
    }

    /// How many tasks the array `array` has.
    pub(super) fn array_size(&self, array: JobId) -> u32 {
        match self.jobs.get(array).and_then(|j| j.record.array) {
            Some(a) if a.count > 0 => a.count,
            _ => self.dependency_targets(array.0).len() as u32,
        }
    }

    /// What the jobs a dependency on `id` waits for are: their distinct states (all a
    /// verdict needs), found once and kept until one of them changes (`job_changed`).
    fn upstream(&self, id: u64) -> Named {
        if let Some(u) = self.gates.summaries().get(&id) {
            return u.clone();
        }
        let found = self.upstream_now(id);
        self.gates.summaries().insert(id, found.clone());
        found
    }

    /// The same, found from the jobs now.
    fn upstream_now(&self, id: u64) -> Named {
        let targets = self.dependency_targets(id);
        let mut found = Named {
            classes: Vec::new(),
            total: targets.len() as u32,
            ended: 0,
            single: None,
        };
        if targets.is_empty() {
            // Checked at submission; a job never leaves the table. Treated as failed.
            found.classes.push(Upstream::Ended { ok: false });
        }
        if let [one] = targets.as_slice() {
            found.single = Some(one.record.state());
        }
        for j in targets {
            let u = upstream_of(j.record.state());
            if !found.classes.contains(&u) {
                found.classes.push(u);
            }
            if j.record.state().is_final() {
                found.ended += 1;
            }
        }
        found
    }

    /// Every summary kept is what the jobs say now (none missed a change).
    pub(super) fn check_summaries(&self) -> std::result::Result<(), String> {
        let kept: Vec<(u64, Named)> = self
            .gates
            .summaries()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (id, kept) in kept {
            let now = self.upstream_now(id);
            let same_classes = now.classes.len() == kept.classes.len()
                && now.classes.iter().all(|u| kept.classes.contains(u));
            if !same_classes
                || (now.total, now.ended, now.single) != (kept.total, kept.ended, kept.single)
            {
                return Err(format!(
                    "what job {id} stands for is kept as {kept:?} but is {now:?}"
                ));
            }
        }
        Ok(())
    }

    /// `job` was saved: if what dependencies see of it may have changed (all but the saves
    /// of a running job do), what waits on it is looked at again; if it is a task of an
    /// array with a limit and ended, its array's gated tasks are.
    pub(super) fn job_changed(&mut self, job: JobId) {
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let state = j.record.state();
        if state == State::Running {
            // Started already when it was starting: only its own word changes.
            self.gates.summaries().remove(&job.0);
            return;
        }
        let array = j.record.array;
        let mut named = vec![job.0];
        if let Some(a) = array
            && a.job != job
        {
            named.push(a.job.0);
        }
        let gated = &self.gated;
        let g = &mut self.gates;
        for id in named {
            g.summaries().remove(&id);
            if let Some(waiting) = g.dependents.get_mut(&id) {
                waiting.retain(|w| gated.contains(w));
                g.dirty.extend(waiting.iter().copied());
                if waiting.is_empty() {
                    g.dependents.remove(&id);
                }
            }
        }
        if let Some(a) = array
            && a.throttle > 0
            && (state.is_final() || state == State::Queued)
        {
            let end = a.job.0 + u64::from(a.count.max(1));
            let tasks = self.gated.range(a.job..JobId(end)).copied();
            self.gates.dirty.extend(tasks);
        }
    }

    /// Tasks of `array` queued for nodes or running (counted once per pass, in `cache`).
    fn active_tasks(&self, array: JobId, cache: &mut HashMap<JobId, u32>) -> u32 {
        *cache.entry(array).or_insert_with(|| {
            self.dependency_targets(array.0)
                .iter()
                .filter(|j| match j.record.state() {
                    State::Queued => !self.gated.contains(&j.id()),
                    s => s.is_placed(),
                })
                .count() as u32
        })
    }

    /// What keeps `job` out of the queue now, if anything.
    pub(super) fn gate(&self, job: &Job, cache: &mut HashMap<JobId, u32>) -> Option<Gate> {
        if let Some(h) = &job.record.hold {
            return Some(Gate::Held(h.clone()));
        }
        let verdict = dependency::evaluate(&job.record.dependency, |id| self.upstream(id).classes);
        match verdict {
            Verdict::Met => {}
            Verdict::Waiting(d) => return Some(Gate::Dependency(d)),
            Verdict::Never(d, u) => return Some(Gate::Never(d, u)),
        }
        let a = job.record.array?;
        (a.throttle > 0 && self.active_tasks(a.job, cache) >= a.throttle).then_some(
            Gate::Throttled {
                array: a.job,
                limit: a.throttle,
            },
        )
    }

    /// Queue a job for nodes (it was gated, or is new and has no gate).
    pub(super) fn enqueue(&mut self, fx: &mut Effects, now: Now, id: JobId) -> Result<()> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        let plan = self.sched.submit(
            now.mono_s(),
            JobSpec {
                id,
                shape: Shape::new(job.record.w, job.record.h),
                estimate: (job.record.time_limit_s > 0).then_some(job.record.time_limit_s as f64),
                user: job.record.owner.uid,
            },
        )?;
        self.execute(fx, now, plan);
        Ok(())
    }

    /// Queue the gated jobs whose gate opened; end those whose dependency can never hold.
    /// Only jobs something changed for are looked at (`GateIndex::dirty`), at most
    /// `ADMIT_PER_ROUND` a round; what they change marks more, looked at in turn.
    pub(super) fn admit_ready(&mut self, fx: &mut Effects, now: Now) {
        let mut cache = HashMap::new();
        for _ in 0..ADMIT_PER_ROUND {
            let Some(id) = self.gates.dirty.pop_first() else {
                return;
            };
            if !self.gated.contains(&id) {
                continue;
            }
            let Some(job) = self.jobs.get(id) else {
                self.gated.remove(&id);
                continue;
            };
            // A hold is lifted by a request, which marks the job again.
            if job.record.hold.is_some() {
                continue;
            }
            match self.gate(job, &mut cache) {
                None => {
                    let array = job.record.array.map(|a| a.job);
                    self.gated.remove(&id);
                    if let Err(e) = self.enqueue(fx, now, id) {
                        tracing::warn!(job = %id, error = %e, "cannot queue a released job");
                    }
                    if let Some(a) = array {
                        *cache.entry(a).or_default() += 1;
                    }
                }
                Some(Gate::Never(d, u)) => {
                    self.gated.remove(&id);
                    self.end_unplaced(fx, now, id, never_text(d, u));
                    // Tasks of its array may move now.
                    cache.clear();
                }
                Some(_) => {}
            }
        }
    }

    /// Why a gated job waits, for its pending reason (`cache`: array limits counted for a
    /// listing of many).
    pub(super) fn gate_text(&self, job: &Job, cache: &mut HashMap<JobId, u32>) -> String {
        match self.gate(job, cache) {
            Some(Gate::Held(h)) if h.admin => format!("held by admin {}", h.by),
            Some(Gate::Held(h)) => format!("held by {} (gangctl release {})", h.by, job.id()),
            Some(Gate::Dependency(d)) => {
                let named = self.upstream(d.job);
                let what = match named.single {
                    Some(state) => {
                        format!("job {} is {}", d.job, super::messaging::state_word(state))
                    }
                    None => format!(
                        "array {}: {} of {} tasks ended",
                        d.job, named.ended, named.total
                    ),
                };
                format!("dependency {d}: {what}")
            }
            Some(Gate::Throttled { array, limit }) => {
                format!("array {array} runs at most {limit} tasks at once")
            }
            Some(Gate::Never(d, u)) => never_text(d, u),
            None => "released: queued with the next round".into(),
        }
    }

    /// `gangctl hold/release/update`: what a caller may change of a job.
    pub(super) fn update(
        &mut self,
        fx: &mut Effects,
        now: Now,
        caller: &Caller,
        u: JobUpdate,
    ) -> Result<JobView> {
        let id = u.job;
        if let Some(code) = u.end_with {
            return self.end_allocation(fx, now, caller, id, code);
        }
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        self.check_access(caller, job, "update")?;
        if u.hold.is_some()
            && let Some(a) = job.record.allocation
        {
            return Err(MasterError::Invalid(format!(
                "job {id} is a step of allocation {a}: steps are not held (hold the allocation,                  or cancel the step)"
            )));
        }
        let state = job.record.state();
        if state.is_final() {
            return Err(MasterError::AlreadyEnded {
                job: id,
                state: super::messaging::state_word(state),
            });
        }
        if let Some(limit) = u.time_limit_s {
            let cur = job.record.time_limit_s;
            let raises = cur != 0 && (limit == 0 || limit > cur);
            if raises && !caller.admin {
                return Err(MasterError::Forbidden(format!(
                    "job {id} has a time limit of {cur} s; a user may lower it, only an admin \
                     may raise it (asked {})",
                    if limit == 0 {
                        "none".to_string()
                    } else {
                        format!("{limit} s")
                    }
                )));
            }
        }
        if let Some(name) = &u.name {
            crate::job::check_name(name).map_err(MasterError::Invalid)?;
        }
        match u.hold {
            Some(true) if state != State::Queued => {
                return Err(MasterError::NotQueued {
                    job: id,
                    state: super::messaging::state_word(state),
                    action: "held",
                });
            }
            Some(false) if job.record.hold.as_ref().is_some_and(|h| h.admin) && !caller.admin => {
                return Err(MasterError::Forbidden(format!(
                    "job {id} was held by an admin ({}); only an admin may release it",
                    job.record
                        .hold
                        .as_ref()
                        .map(|h| h.by.as_str())
                        .unwrap_or_default()
                )));
            }
            _ => {}
        }
        // A task that shares its array's spec gets one of its own to change: its bytes
        // count again, within its owner's limit.
        if (u.time_limit_s.is_some() || u.name.is_some()) && job.spec_shared && job.charged {
            self.check_queue_room(
                &job.record.owner,
                0,
                super::queued::spec_bytes(&job.record.spec),
            )
            .map_err(|e| {
                MasterError::Invalid(format!(
                    "job {id} shares its array's command and environment; changing it \
                         alone copies them: {e}"
                ))
            })?;
        }
        // Checked: now change it.
        if u.hold == Some(true) && !self.gated.contains(&id) {
            let plan = self.sched.finish(now.mono_s(), id)?;
            self.gated.insert(id);
            self.execute(fx, now, plan);
        }
        let job = self.jobs.get_mut(id).expect("present");
        match u.hold {
            Some(true) => {
                job.record.hold = Some(Hold {
                    by: caller.owner.user.clone(),
                    admin: caller.admin && caller.owner.uid != job.record.owner.uid,
                })
            }
            // Queued again after this round (admit_ready), if nothing else holds it.
            Some(false) => {
                job.record.hold = None;
                self.gates.dirty.insert(id);
            }
            None => {}
        }
        if u.time_limit_s.is_some() || u.name.is_some() {
            // A task that shared its array's spec gets one of its own (saved whole).
            job.spec_shared = false;
            let (uid, before) = (job.record.owner.uid, job.record.spec.clone());
            let charged = job.charged;
            let spec = Arc::make_mut(&mut job.record.spec);
            if let Some(limit) = u.time_limit_s {
                spec.time_limit_s = limit;
            }
            if let Some(name) = u.name {
                spec.name = name;
            }
            if charged && !Arc::ptr_eq(&before, &job.record.spec) {
                let after = job.record.spec.clone();
                self.queued.uncharge(uid, &before);
                self.queued.charge(uid, &after);
            }
        }
        if let Some(limit) = u.time_limit_s {
            self.sched
                .set_estimate(id, (limit > 0).then_some(limit as f64));
        }
        self.save(fx, now, id);
        self.view(id, now)
    }
}

fn never_text(d: Dep, u: Upstream) -> String {
    let how = match u {
        Upstream::Ended { ok: true } => "completed",
        Upstream::Ended { ok: false } => "ended without success",
        Upstream::Started => "started",
        Upstream::Waiting => "queued",
    };
    format!("dependency {d} can never be met: job {} {how}", d.job)
}
