//! A job submitted: validated at the edge of the state (shape, command, limits, what the
//! caller may ask), accepted durably in the round, then queued or gated (`policy`).

use std::sync::Arc;

use gang_core::{JobId, Request, Shape};
use tracing::warn;

use crate::error::{MasterError, Result};
use crate::job::{ArrayTask, Defaults, Hold, Job, JobRecord, Spec, State};
use crate::state::effects::{Effect, Effects, Metric, Save};
use crate::state::events::NewJob;
use crate::state::records::queued;
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

/// The longest working directory (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;

impl MasterState {
    /// The cluster's defaults for what a submission leaves out.
    pub(in crate::state) fn defaults(&self) -> Defaults {
        Defaults {
            gang: self.cfg.gang_mode,
            on_deadlock: self.cfg.on_deadlock,
            mpi: self.cfg.mpi,
        }
    }

    /// What every job is checked for, steps too: who, what it runs, where, its
    /// environment and output patterns.
    pub(in crate::state) fn validate_command(&self, new: &NewJob) -> Result<()> {
        let limits = &self.cfg.limits;
        if new.owner.uid == 0 && !self.cfg.auth.allow_root_jobs {
            return Err(MasterError::RootJobs);
        }
        if new.allocate && new.argv.is_empty() {
            if new.stdin {
                return Err(MasterError::Invalid(
                    "an allocation without a batch script has no rank to give stdin to".into(),
                ));
            }
        } else if new.argv.first().is_none_or(|a| a.is_empty()) {
            return Err(MasterError::Invalid("the command is empty".into()));
        }
        // As exec counts them: each string and its NUL (a batch script with them).
        let script = new.script.as_ref().map_or(0, |s| s.text.len() + 1);
        let argv_bytes: usize = new.argv.iter().map(|a| a.len() + 1).sum::<usize>() + script;
        if let Some(s) = &new.script {
            if s.at == 0 || s.at as usize > new.argv.len() {
                return Err(MasterError::Invalid(format!(
                    "spec.script_at: the script's path goes after the interpreter, at 1 to {}; got {}",
                    new.argv.len(),
                    s.at
                )));
            }
            if s.text.contains('\0') {
                return Err(MasterError::Invalid(
                    "the batch script contains a NUL byte".into(),
                ));
            }
        }
        if argv_bytes > limits.max_argv_bytes {
            return Err(MasterError::TooLarge {
                what: "the command line",
                size: argv_bytes,
                limit: limits.max_argv_bytes,
                key: "max_argv_bytes",
            });
        }
        let env_bytes: usize = new.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        if env_bytes > limits.max_env_bytes {
            return Err(MasterError::TooLarge {
                what: "the environment",
                size: env_bytes,
                limit: limits.max_env_bytes,
                key: "max_env_bytes",
            });
        }
        if let Some((k, _)) = new
            .env
            .iter()
            .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return Err(MasterError::Invalid(format!(
                "environment variable {k:?}: a name must be non-empty, and names and values \
                 may not contain '=' (names) or NUL"
            )));
        }
        if let Some(a) = new.argv.iter().find(|a| a.contains('\0')) {
            return Err(MasterError::Invalid(format!(
                "argument {a:?} contains a NUL byte"
            )));
        }
        if !new.cwd.starts_with('/') {
            return Err(MasterError::Invalid(format!(
                "the working directory must be an absolute path, got {:?}",
                new.cwd
            )));
        }
        if new.cwd.len() > MAX_PATH_BYTES || new.cwd.contains('\0') {
            return Err(MasterError::Invalid(format!(
                "the working directory must be at most {MAX_PATH_BYTES} bytes without NUL, got {} bytes",
                new.cwd.len()
            )));
        }
        if !new.name.is_empty() {
            crate::job::check_name(&new.name).map_err(MasterError::Invalid)?;
        }
        if new.at_submit.array.is_none() {
            let patterns = [&new.output_files.output, &new.output_files.error];
            if patterns
                .iter()
                .any(|p| gang_core::job::output_pattern::has_array_escapes(p))
            {
                return Err(MasterError::Invalid(
                    "spec.output: %A and %a are a job array's id and task index; this job \
                     is not an array (--array)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    pub(in crate::state) fn validate(&self, new: &NewJob) -> Result<Shape> {
        let limits = &self.cfg.limits;
        self.validate_command(new)?;
        let shape = new.shape.parse::<Request>()?.resolve(self.cfg.mesh)?;
        let max_nodes = limits.max_job_nodes;
        if max_nodes > 0 && shape.area() > u64::from(max_nodes) {
            return Err(MasterError::Invalid(format!(
                "job asks {shape} ({} nodes); the limit is {max_nodes} nodes per job \
                 (max_job_nodes)",
                shape.area()
            )));
        }
        self.sched.validate(JobId(self.next_id), shape)?;
        let tasks = new.at_submit.array.as_ref().map_or(1, |a| a.tasks.len());
        if tasks > limits.max_array_tasks {
            return Err(MasterError::Invalid(format!(
                "the array has {tasks} tasks; the limit is {} (max_array_tasks)",
                limits.max_array_tasks
            )));
        }
        // Only on one's own jobs: a dependency tells whether the job it names started or
        // ended well. Another user's job is as if it did not exist (the same words: the
        // answer must not tell it exists either).
        for d in &new.dependency {
            let mine = self
                .jobs
                .get(JobId(d.job))
                .is_some_and(|j| j.record.owner.uid == new.owner.uid);
            if !mine {
                return Err(MasterError::Invalid(format!(
                    "spec.dependency: {d}: there is no job {} of yours",
                    d.job
                )));
            }
        }
        self.check_queue_room(&new.owner, tasks, queued::spec_bytes(new))?;
        Ok(shape)
    }

    /// Whether `owner` may queue `jobs` more jobs holding `bytes` more (their one spec).
    pub(in crate::state) fn check_queue_room(
        &self,
        owner: &crate::job::Owner,
        jobs: usize,
        bytes: u64,
    ) -> Result<()> {
        let limits = &self.cfg.limits;
        let (queued, held) = self.queued.of(owner.uid);
        if queued + jobs > limits.max_queued_per_user {
            return Err(MasterError::QueueFull {
                user: owner.user.clone(),
                queued,
                limit: limits.max_queued_per_user,
            });
        }
        if held + bytes > limits.max_queued_bytes_per_user {
            return Err(MasterError::QueueBytes {
                user: owner.user.clone(),
                held,
                adds: bytes,
                limit: limits.max_queued_bytes_per_user,
            });
        }
        Ok(())
    }
}

pub fn on_submit(st: &mut MasterState, fx: &mut Effects, now: Now, new: NewJob) -> Result<JobView> {
    if let Some(t) = &new.client_token
        && let Some(id) = st.jobs.by_token(new.owner.uid, t)
    {
        // A retry (its first answer was lost): the job it created, not a second one.
        return st.view(id, now);
    }
    if new.allocation.is_some() {
        return st.submit_step(fx, now, new);
    }
    let shape = st.validate(&new)?;
    let first = JobId(st.next_id);
    let hold = new.at_submit.hold.then(|| Hold {
        by: new.owner.user.clone(),
        admin: false,
    });
    let array = new.at_submit.array.clone();
    let spec = new.resolve(st.defaults());
    let record = |id: JobId, spec: Arc<Spec>, array: Option<ArrayTask>| {
        let mut r = JobRecord::queued(id, spec, shape.w, shape.h, now.wall_ns);
        r.hold = hold.clone();
        r.array = array;
        r
    };
    let spec = Arc::new(spec);
    let records: Vec<JobRecord> = match &array {
        None => vec![record(first, spec, None)],
        Some(a) => {
            // One spec for every task, saved once: a task's index is added where its
            // ranks are launched (`ArrayTask::task_spec`).
            fx.emit(Effect::Save(Save::Spec {
                array: first,
                spec: spec.clone(),
            }));
            a.tasks
                .iter()
                .enumerate()
                .map(|(i, &task)| {
                    let place = ArrayTask {
                        job: first,
                        task,
                        throttle: a.throttle,
                        count: a.tasks.len() as u32,
                        min: a.tasks[0],
                        max: a.tasks[a.tasks.len() - 1],
                    };
                    record(JobId(first.0 + i as u64), spec.clone(), Some(place))
                })
                .collect()
        }
    };
    // A job with nothing to wait for goes to the core at once; the others wait gated
    // (held, dependencies, their array's limit) until `admit_ready` lets them in.
    let mut cache = Default::default();
    for r in records {
        let id = r.id;
        let mut job = Job::new(r);
        job.spec_shared = job.record.array.is_some();
        if !job.record.dependency.is_empty() {
            st.gates.wait_on(id, &job.record.dependency);
        }
        st.jobs.insert(job);
        st.next_id = id.0 + 1;
        // Gated while its gate is looked at: a task does not count against its own
        // array's limit.
        st.gated.insert(id);
        let job = st.jobs.get(id).expect("inserted");
        if st.gate(job, &mut cache).is_none() {
            st.gated.remove(&id);
            match st.enqueue(fx, now, id) {
                // Validated above, so the core does not refuse it; if it ever did, the
                // job says so rather than sit queued where nothing would start it.
                Err(e) => {
                    warn!(job = %id, error = %e, "the scheduler refused a validated job");
                    let job = st.jobs.get_mut(id).expect("inserted");
                    crate::state::transition(fx, &mut job.record, State::Failed);
                    job.record.reason = format!("could not be queued: {e}");
                    job.record.end_ns = now.wall_ns;
                }
                // The next tasks count this one against their array's limit.
                Ok(()) if array.as_ref().is_some_and(|a| a.throttle > 0) => {
                    *cache.entry(first).or_default() += 1;
                }
                Ok(()) => {}
            }
        }
        fx.emit(Effect::Metric(Metric::Submitted));
        st.save(fx, now, id);
    }
    st.view(first, now)
}
