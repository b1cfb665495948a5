//! Dependencies (`afterok:12`, `afterany:5`): a queued job waits until the jobs it names
//! are as it asks, and ends if they can never be. What the named jobs are is kept per named
//! id ([`Named`]) until one of them changes, and who waits on what ([`GateIndex`]), so that
//! a round looks only at the gated jobs something changed for.

use gang_core::JobId;
use gang_core::schedule::dependency::{self, Dep, Upstream, Verdict};

use super::gate::Gate;
use crate::job::{Job, State};
use crate::state::MasterState;
use crate::state::records::gate_index::Named;

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
    pub(in crate::state) fn dependency_targets(&self, id: u64) -> Vec<&Job> {
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

    /// What the jobs a dependency on `id` waits for are: their distinct states (all a
    /// verdict needs), found once and kept until one of them changes (`job_changed`).
    pub(in crate::state) fn upstream(&self, id: u64) -> Named {
        if let Some(u) = self.gates.summaries().get(&id) {
            return u.clone();
        }
        let found = self.upstream_now(id);
        self.gates.summaries().insert(id, found.clone());
        found
    }

    /// The same, found from the jobs now.
    pub(in crate::state) fn upstream_now(&self, id: u64) -> Named {
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
    pub(in crate::state) fn check_summaries(&self) -> std::result::Result<(), String> {
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
    pub(in crate::state) fn job_changed(&mut self, job: JobId) {
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

    /// Whether `job`'s dependencies keep it out of the queue (or end it).
    pub(in crate::state) fn dependency_gate(&self, job: &Job) -> Option<Gate> {
        match dependency::evaluate(&job.record.dependency, |id| self.upstream(id).classes) {
            Verdict::Met => None,
            Verdict::Waiting(d) => Some(Gate::Dependency(d)),
            Verdict::Never(d, u) => Some(Gate::Never(d, u)),
        }
    }

    /// What a pending reason says of a dependency being waited on.
    pub(in crate::state) fn dependency_text(&self, d: Dep) -> String {
        let named = self.upstream(d.job);
        let what = match named.single {
            Some(state) => format!("job {} is {}", d.job, state.word()),
            None => format!(
                "array {}: {} of {} tasks ended",
                d.job, named.ended, named.total
            ),
        };
        format!("dependency {d}: {what}")
    }
}

pub(in crate::state) fn never_text(d: Dep, u: Upstream) -> String {
    let how = match u {
        Upstream::Ended { ok: true } => "completed",
        Upstream::Ended { ok: false } => "ended without success",
        Upstream::Started => "started",
        Upstream::Waiting => "queued",
    };
    format!("dependency {d} can never be met: job {} {how}", d.job)
}
