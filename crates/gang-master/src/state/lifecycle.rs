//! A job's life: submitted, placed and launched, running, ended (completed, failed,
//! cancelled), and the nodes it held given back.
//!
//! Ranks: Pending (launch sent) -> Running -> Exited(code) or Gone (could not start, node
//! lost). A job ends when every rank is done; the first failure sets its exit code and
//! reason, and stops the other ranks.

use std::sync::Arc;

use gang_core::{Decision, JobId, Plan, Request, Shape, Submesh};
use tracing::warn;

use crate::error::{MasterError, Result};
use crate::job::{
    ArrayTask, Defaults, Hold, Job, JobRecord, OutputLoss, Rank, Spec, State, signal_code,
};
use crate::state::effects::{Effect, Effects, LaunchOrder, Metric, Save};
use crate::state::events::{Caller, ExitHow, LaunchFailure, NewJob, RankExit};
use crate::state::views::JobView;
use crate::state::{MasterState, Now, Placed, queued};

/// The exit code of a job that ran out of time (`timeout(1)`'s).
pub const TIMEOUT_EXIT: i32 = 124;
/// The longest working directory (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;

impl MasterState {
    /// The cluster's defaults for what a submission leaves out.
    pub(super) fn defaults(&self) -> Defaults {
        Defaults {
            gang: self.cfg.gang_mode,
            on_deadlock: self.cfg.on_deadlock,
            mpi: self.cfg.mpi,
        }
    }

    /// What every job is checked for, steps too: who, what it runs, where, its
    /// environment and output patterns.
    pub(super) fn validate_command(&self, new: &NewJob) -> Result<()> {
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
                .any(|p| gang_core::output_pattern::has_array_escapes(p))
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

    fn validate(&self, new: &NewJob) -> Result<Shape> {
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
    pub(super) fn check_queue_room(
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

    pub(super) fn submit(&mut self, fx: &mut Effects, now: Now, new: NewJob) -> Result<JobView> {
        if let Some(t) = &new.client_token
            && let Some(id) = self.jobs.by_token(new.owner.uid, t)
        {
            // A retry (its first answer was lost): the job it created, not a second one.
            return self.view(id, now);
        }
        if new.allocation.is_some() {
            return self.submit_step(fx, now, new);
        }
        let shape = self.validate(&new)?;
        let first = JobId(self.next_id);
        let hold = new.at_submit.hold.then(|| Hold {
            by: new.owner.user.clone(),
            admin: false,
        });
        let array = new.at_submit.array.clone();
        let spec = new.resolve(self.defaults());
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
                self.gates.wait_on(id, &job.record.dependency);
            }
            self.jobs.insert(job);
            self.next_id = id.0 + 1;
            // Gated while its gate is looked at: a task does not count against its own
            // array's limit.
            self.gated.insert(id);
            let job = self.jobs.get(id).expect("inserted");
            if self.gate(job, &mut cache).is_none() {
                self.gated.remove(&id);
                match self.enqueue(fx, now, id) {
                    // Validated above, so the core does not refuse it; if it ever did, the
                    // job says so rather than sit queued where nothing would start it.
                    Err(e) => {
                        warn!(job = %id, error = %e, "the scheduler refused a validated job");
                        let job = self.jobs.get_mut(id).expect("inserted");
                        super::transition(fx, &mut job.record, State::Failed);
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
            self.save(fx, now, id);
        }
        self.view(first, now)
    }

    /// `by`: who asks (`None`: the master itself, e.g. for a time limit).
    pub(super) fn cancel(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        by: Option<&Caller>,
        reason: String,
    ) -> Result<JobView> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        if let Some(caller) = by {
            self.check_access(caller, job, "cancel")?;
        }
        match job.record.state() {
            State::Queued => {
                let plan = if self.gated.remove(&id) || job.record.allocation.is_some() {
                    Default::default()
                } else {
                    self.sched.finish(now.mono_s(), id)?
                };
                self.end_unplaced(fx, now, id, reason);
                self.execute(fx, now, plan);
            }
            s if s.is_final() && by.is_some() => {
                return Err(MasterError::AlreadyEnded {
                    job: id,
                    state: super::messaging::state_word(s),
                });
            }
            State::Starting | State::Running if job.cancelled.is_none() => {
                // Its run time ends here: the time its ranks take to stop (longer on a
                // loaded host) is not run time, and a time limit ends a job at its limit.
                let run = self.run_ns(job, now.wall_ns);
                // The reply shows the job still running (its ranks are, until they stop),
                // and why it will end.
                let job = self.jobs.get_mut(id).expect("present");
                job.record.run_ns = run;
                job.run_accounted_to = now.wall_ns;
                job.record.reason = format!("{reason}; its ranks are being stopped");
                job.cancelled = Some(reason);
                // Durable before the reply: a master restart carries the cancel on.
                self.save(fx, now, id);
                self.kill(fx, id, self.cfg.kill_grace_ms);
                // An allocation's steps end with it (and one without ranks ends here).
                self.maybe_finish(fx, now, id);
            }
            _ => {}
        }
        self.view(id, now)
    }

    /// A job that never ran ends cancelled, saying why (out of the core and the gates
    /// already).
    pub(super) fn end_unplaced(&mut self, fx: &mut Effects, now: Now, id: JobId, why: String) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        super::transition(fx, &mut job.record, State::Cancelled);
        job.record.reason = why;
        job.record.end_ns = now.wall_ns;
        fx.emit(Effect::Metric(Metric::Finished(State::Cancelled)));
        self.save(fx, now, id);
    }

    /// Carry out a plan of the core: agents learn of slots through slice tables, so only
    /// starts need work here.
    pub(super) fn execute(&mut self, fx: &mut Effects, now: Now, plan: Plan) {
        for d in plan.decisions {
            if let Decision::Start { job, submesh, .. } = d {
                self.launch(fx, now, job, submesh);
            }
        }
    }

    pub(super) fn launch(&mut self, fx: &mut Effects, now: Now, id: JobId, submesh: Submesh) {
        let Some(job) = self
            .jobs
            .get_mut(id)
            .filter(|j| !j.record.state().is_final())
        else {
            return;
        };
        super::transition(fx, &mut job.record, State::Starting);
        job.record.submesh = Some(submesh);
        job.record.start_ns = now.wall_ns;
        job.run_accounted_to = now.wall_ns;
        job.ranks = vec![Rank::Pending; job.rank_count() as usize];
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
    pub(super) fn rank_running(&mut self, fx: &mut Effects, id: JobId, rank: u32) {
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
    pub(super) fn note_started(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let started = job
            .ranks
            .iter()
            .all(|r| matches!(r, Rank::Running | Rank::Exited(_)));
        if !started
            || job.record.state() != State::Starting
            || job.failure.is_some()
            || job.cancelled.is_some()
        {
            return;
        }
        let job = self.jobs.get_mut(id).expect("present");
        super::transition(fx, &mut job.record, State::Running);
        if let Some(t) = self.placed_at.remove(&id) {
            fx.emit(Effect::Metric(Metric::Launched(
                (now.mono_ns - t.mono_ns) as f64 / 1e9,
            )));
        }
        self.save(fx, now, id);
    }

    pub(super) fn launched(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        rank: u32,
        result: std::result::Result<u32, LaunchFailure>,
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
                self.note_started(fx, now, id);
            }
            Ok(_) => {}
            Err(failure) => self.rank_gone(fx, now, id, rank, failure.to_string()),
        }
    }

    /// A rank will never run (it could not start, or its node is lost): fail the job.
    pub(super) fn rank_gone(
        &mut self,
        fx: &mut Effects,
        now: Now,
        id: JobId,
        rank: u32,
        reason: String,
    ) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if let Some(slot) = job.ranks.get_mut(rank as usize)
            && !slot.is_done()
        {
            *slot = Rank::Gone;
        }
        if job.start_teardown(None, reason) {
            self.kill(fx, id, 0);
        }
        self.save(fx, now, id);
        self.maybe_finish(fx, now, id);
    }

    /// Stop every rank of a job that may still run: SIGTERM, then SIGKILL after `grace_ms`.
    pub(super) fn kill(&self, fx: &mut Effects, id: JobId, grace_ms: u32) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        for r in 0..job.ranks.len() as u32 {
            if !job.ranks[r as usize].is_done()
                && let Some(node) = job.node_of(r)
            {
                self.signal_node(fx, id, node, grace_ms);
            }
        }
    }

    pub(super) fn rank_exit(&mut self, fx: &mut Effects, now: Now, exit: RankExit) {
        let id = exit.job;
        let Some(job) = self.jobs.get_mut(id) else {
            warn!(job = %id, "exit report for an unknown job");
            return;
        };
        // The gRPC layer refuses these; the core does not rely on it.
        if !super::messaging::runs_there(job, exit.rank, exit.node) {
            warn!(job = %id, rank = exit.rank, node = ?exit.node, "exit report for a rank that does not run there: ignored");
            return;
        }
        let Some(slot) = job.ranks.get_mut(exit.rank as usize) else {
            return;
        };
        if slot.is_done() {
            return;
        }
        let (code, what) = match exit.how {
            ExitHow::Code(c) => (c, format!("exited with code {c}")),
            ExitHow::Signal(s) => (signal_code(s), crate::job::killed_by(s)),
            ExitHow::Error(e) => (127, e),
            ExitHow::Unknown => (1, "ended for an unknown reason".into()),
        };
        *slot = Rank::Exited(code);
        let job = self.jobs.get_mut(id).expect("present");
        job.record.usage.add(exit.rank, exit.usage);
        for &(stream, bytes) in exit.lost.iter().filter(|(_, b)| *b > 0) {
            job.record.output_lost.push(OutputLoss {
                rank: exit.rank,
                stream,
                bytes,
            });
        }
        self.note_started(fx, now, id);
        if code != 0 {
            let (x, y) = exit.node;
            let job = self.jobs.get_mut(id).expect("present");
            let what = exit.abort.as_deref().unwrap_or(&what);
            let why = format!("rank {} on node ({x},{y}) {what}", exit.rank);
            if job.start_teardown(Some(code), why) {
                self.kill(fx, id, self.cfg.kill_grace_ms);
            }
        }
        // The agent hears its report was taken only once this is saved: a master restart
        // must not count the rank as lost.
        self.save(fx, now, id);
        self.maybe_finish(fx, now, id);
    }

    /// When every rank is done: the job's final state, its exit code, and its nodes back.
    pub(super) fn maybe_finish(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        if job.record.state().is_final() {
            return;
        }
        if job.record.allocate {
            if !job.allocation_over() {
                return;
            }
            // Its steps end with it; it ends once they have.
            self.end_steps(fx, now, id);
            if self.live_steps(id) > 0 {
                return;
            }
        } else if !job.all_ranks_done() {
            return;
        }
        let job = self.jobs.get(id).expect("present");
        let run = self.run_ns(job, now.wall_ns);
        let job = self.jobs.get_mut(id).expect("present");
        job.record.run_ns = run;
        job.run_accounted_to = now.wall_ns;
        let (state, code, reason) = match (&job.cancelled, &job.failure) {
            // A job its time limit ended exits 124 everywhere (as `timeout(1)`, and as prun
            // exits), whatever signal its ranks died of: scripts tell it from a failure.
            (Some(why), _) if job.timed_out => (State::Timeout, Some(TIMEOUT_EXIT), why.clone()),
            (Some(why), f) => (State::Cancelled, f.as_ref().and_then(|f| f.0), why.clone()),
            (None, Some((code, why))) => (State::Failed, *code, why.clone()),
            (None, None) => match job.ended_with {
                Some(c) if c != 0 => (
                    State::Failed,
                    Some(c),
                    format!("the allocation's command exited with code {c}"),
                ),
                _ => (State::Completed, Some(0), String::new()),
            },
        };
        super::transition(fx, &mut job.record, state);
        job.record.exit_code = code;
        job.record.reason = reason;
        job.record.end_ns = now.wall_ns;
        let job_alloc = job.record.allocation;
        self.adopted.remove(&id);
        self.placed_at.remove(&id);
        fx.emit(Effect::Metric(Metric::Finished(state)));
        self.save(fx, now, id);
        if let Some(alloc) = job_alloc {
            // Its nodes go back to its allocation: the next step may start, or the
            // allocation, waiting for its steps, end.
            self.admit_steps(fx, now, alloc);
            self.maybe_finish(fx, now, alloc);
            return;
        }
        match self.sched.finish(now.mono_s(), id) {
            Ok(plan) => self.execute(fx, now, plan),
            Err(e) => warn!(job = %id, error = %e, "scheduler did not know the finished job"),
        }
    }

    /// Persist a job and announce it (both take effect with the round), and count it in
    /// its owner's queued jobs while it is queued.
    pub(super) fn save(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let queued = job.record.state() == State::Queued;
        if queued != job.charged {
            let (uid, spec) = (job.record.owner.uid, job.record.spec.clone());
            if queued {
                self.queued.charge(uid, &spec);
            } else {
                self.queued.uncharge(uid, &spec);
            }
            self.jobs.get_mut(id).expect("present").charged = queued;
        }
        self.job_changed(id);
        let job = self.jobs.get(id).expect("present");
        fx.emit(Effect::Save(Save::Job(Box::new(
            job.persisted(self.home_slice(id)),
        ))));
        fx.emit(Effect::JobChanged(Box::new(self.job_view(job, now))));
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
