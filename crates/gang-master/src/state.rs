//! The one task that owns the master's state: the scheduler core, the jobs, the nodes and
//! the database. gRPC handlers send it [`Cmd`]s and await the reply; work that waits on the
//! network (launching ranks, signalling agents) runs in spawned tasks that report back with
//! another command, so the state task never awaits anything but its queue.
//!
//! Commands are taken in batches: the batch's database writes share one transaction and
//! replies go out only after it commits, so an accepted job is always durable.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gang_core::{Config as CoreConfig, Decision, JobId, JobSpec, Plan, Request, Scheduler, Shape};
use gang_proto::v1;
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{info, warn};

use crate::agents::AgentPool;
use crate::config::MasterConfig;
use crate::error::{MasterError, Result};
use crate::job::{GangMode, Job, JobRecord, Rank, State, signal_code};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::switch_stats::SwitchStats;
use gang_core::Slicer;

type Reply<T> = oneshot::Sender<Result<T>>;

pub enum Cmd {
    Submit(v1::SubmitRequest, Reply<v1::JobInfo>),
    Cancel(JobId, u32, Reply<v1::JobInfo>),
    GetJob(JobId, Reply<v1::JobInfo>),
    ListJobs(v1::ListJobsRequest, Reply<Vec<v1::JobInfo>>),
    /// Where rank 0 of a job runs (for stdin): answered once it runs, or `None` once the
    /// job has ended without it running.
    Rank0(JobId, Reply<Option<String>>),
    Register(v1::RegisterRequest, Reply<v1::RegisterResponse>),
    Heartbeat(v1::HeartbeatRequest, Reply<v1::HeartbeatResponse>),
    RankExit(v1::RankExit, Reply<()>),
    ListNodes(Reply<v1::ListNodesResponse>),
    SetDrained(u32, u32, bool, Reply<v1::NodeInfo>),
    Matrix(Reply<v1::Matrix>),
    Stats(Reply<v1::Stats>),
    /// An agent acknowledged a slice table.
    TableAcked {
        x: u32,
        y: u32,
        version: u64,
    },
    /// A launch finished: the rank's pid, or the error naming the node.
    Launched {
        job: JobId,
        rank: u32,
        result: std::result::Result<u32, String>,
    },
    /// Periodic: node timeouts, time limits, ranks lost across a restart.
    Tick,
}

/// How the gRPC side talks to the state task.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Cmd>,
    events: broadcast::Sender<v1::JobInfo>,
}

impl Handle {
    pub async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .await
            .map_err(|_| MasterError::ShuttingDown)?;
        rx.await.map_err(|_| MasterError::ShuttingDown)?
    }

    /// Job state changes, as they are committed.
    pub fn events(&self) -> broadcast::Receiver<v1::JobInfo> {
        self.events.subscribe()
    }
}

#[derive(Debug, Clone)]
struct Node {
    address: Option<String>,
    up: bool,
    drained: bool,
    last_heartbeat: Instant,
    last_heartbeat_ns: i64,
    clock_offset_ns: i64,
    clock_error_ns: i64,
    clock_from_host: bool,
    /// The newest slice table version the agent acknowledged.
    table_version: u64,
    /// The last table version sent, and when (a heartbeat behind it triggers a resend).
    table_sent: Option<(u64, Instant)>,
}

pub struct MasterState {
    cfg: MasterConfig,
    sched: Scheduler,
    jobs: BTreeMap<JobId, Job>,
    /// Row-major: node (x, y) at y * w + x.
    nodes: Vec<Node>,
    store: Store,
    next_id: u64,
    agents: Arc<AgentPool>,
    metrics: Arc<Metrics>,
    tx: mpsc::Sender<Cmd>,
    events: broadcast::Sender<v1::JobInfo>,
    /// Jobs put back after a restart, and when: their ranks not re-reported by then are lost.
    adopted: HashMap<JobId, Instant>,
    /// Replies held until the batch's transaction commits.
    replies: Vec<Box<dyn FnOnce() + Send>>,
    /// Events held likewise.
    pending_events: Vec<v1::JobInfo>,
    /// When a job was placed, for the launch latency histogram.
    placed_at: HashMap<JobId, Instant>,
    /// Waiting for rank 0 of a job to run.
    rank0_waiters: HashMap<JobId, Vec<Reply<Option<String>>>>,
    /// Slice tables published to the agents.
    slicer: Slicer,
    /// Switch reports (fed by the registry service directly).
    stats: Arc<Mutex<SwitchStats>>,
    /// When run times were last written to the database.
    run_saved: Instant,
}

/// How often accumulated run times are written (a crash loses at most this much of them).
const RUN_SAVE_EVERY: Duration = Duration::from_secs(5);
/// A table the agent has not acknowledged is sent again after this long.
const TABLE_RESEND: Duration = Duration::from_millis(500);

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The scheduler's clock: monotonic seconds since the master started (the core errors out
/// if time goes backwards, and the wall clock can be stepped).
fn now_s() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

fn defer<T: Send + 'static>(
    replies: &mut Vec<Box<dyn FnOnce() + Send>>,
    tx: Reply<T>,
    v: Result<T>,
) {
    replies.push(Box::new(move || {
        let _ = tx.send(v);
    }));
}

impl MasterState {
    /// Open the database, reload every job, and start the state task.
    pub fn start(
        cfg: MasterConfig,
        metrics: Arc<Metrics>,
        agents: Arc<AgentPool>,
        stats: Arc<Mutex<SwitchStats>>,
    ) -> anyhow::Result<Handle> {
        std::fs::create_dir_all(cfg.state_dir())?;
        let store = Store::open(&cfg.state)?;
        let mesh_s = cfg.mesh.to_string();
        match store.mesh()? {
            Some(m) if m != mesh_s => anyhow::bail!(
                "the state database {} was made for a {m} mesh, not {mesh_s}; use another --state",
                cfg.state.display()
            ),
            Some(_) => {}
            None => store.set_mesh(&mesh_s)?,
        }
        let core_cfg = CoreConfig {
            mpl: cfg.mpl,
            allocator: cfg.allocator,
            backfill: cfg.backfill,
            ..CoreConfig::default()
        };
        let sched = Scheduler::new(cfg.mesh, core_cfg)?;
        let table_version = store.table_version()?;
        let quantum_ns = cfg.quantum_ms as i64 * 1_000_000;
        let table_epoch = store.table_epoch(quantum_ns)?;
        let (tx, rx) = mpsc::channel(4096);
        let (events, _) = broadcast::channel(4096);
        let n = cfg.mesh.area() as usize;
        let started = Instant::now(); // nodes count as heard from at startup
        let mut st = MasterState {
            nodes: vec![
                Node {
                    address: None,
                    up: false,
                    drained: false,
                    last_heartbeat: started,
                    last_heartbeat_ns: 0,
                    clock_offset_ns: 0,
                    clock_error_ns: 0,
                    clock_from_host: false,
                    table_version: 0,
                    table_sent: None,
                };
                n
            ],
            next_id: store.next_job_id()?,
            sched,
            jobs: BTreeMap::new(),
            store,
            agents,
            metrics,
            tx: tx.clone(),
            events: events.clone(),
            adopted: HashMap::new(),
            replies: vec![],
            pending_events: vec![],
            placed_at: HashMap::new(),
            rank0_waiters: HashMap::new(),
            slicer: Slicer::new(
                quantum_ns,
                cfg.table_lead_ms as i64 * 1_000_000,
                table_version,
                table_epoch,
            ),
            stats,
            run_saved: Instant::now(),
            cfg,
        };
        st.recover()?;
        tokio::spawn(st.run(rx));
        let tick = tx.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                if tick.send(Cmd::Tick).await.is_err() {
                    break;
                }
            }
        });
        Ok(Handle { tx, events })
    }

    /// Every node starts offline until its agent registers; jobs come back from the
    /// database: running ones at their submesh, queued ones in submission order.
    fn recover(&mut self) -> anyhow::Result<()> {
        let mesh = self.cfg.mesh;
        for y in 0..mesh.h {
            for x in 0..mesh.w {
                self.sched.set_node_offline(now_s(), x, y, true)?;
            }
        }
        for (x, y) in self.store.drained()? {
            if let Some(n) = self.node_mut(x, y) {
                n.drained = true;
            }
        }
        let mut records = self.store.load_jobs()?;
        // Running jobs go back slice by slice: the jobs of one former slice are disjoint,
        // so each lands in a slice no later than its old one and the matrix fits again.
        // Queued jobs keep their submission (id) order.
        records.sort_by_key(|r| {
            let running = matches!(r.state, State::Starting | State::Running);
            let slice = r
                .live
                .as_ref()
                .and_then(|l| l.home_slice)
                .unwrap_or(u32::MAX);
            (!running, if running { slice } else { 0 }, r.id)
        });
        let (mut adopted, mut queued, mut lost) = (0, 0, 0);
        let mut touched = vec![];
        for rec in records {
            let mut job = Job::restored(rec);
            let id = job.id();
            let spec = JobSpec {
                id,
                shape: Shape::new(job.record.w, job.record.h),
                estimate: (job.record.time_limit_s > 0).then_some(job.record.time_limit_s as f64),
            };
            match job.record.state {
                State::Queued => {
                    // Offline nodes keep it queued until agents register.
                    let plan = self.sched.submit(now_s(), spec)?;
                    debug_assert!(plan.started().next().is_none());
                    queued += 1;
                }
                State::Starting | State::Running => {
                    let sm = job
                        .record
                        .submesh
                        .ok_or_else(|| anyhow::anyhow!("running job {id} has no submesh"))?;
                    job.run_accounted_to = now_ns();
                    touched.push(id);
                    match self.sched.adopt(now_s(), spec, sm) {
                        Ok(_) => {
                            self.adopted.insert(id, Instant::now());
                            adopted += 1;
                        }
                        Err(e) => {
                            // Never abort startup over one job: fail it; its ranks are
                            // killed when their agents register (the job is final then).
                            warn!(job = %id, error = %e, "cannot place a running job back");
                            job.fail(
                                None,
                                format!("could not be placed back after a master restart: {e}"),
                            );
                            job.record.state = State::Failed;
                            job.record.reason = job
                                .failure
                                .as_ref()
                                .map(|f| f.1.clone())
                                .unwrap_or_default();
                            job.record.end_ns = now_ns();
                            lost += 1;
                        }
                    }
                }
                _ => {}
            }
            self.jobs.insert(id, job);
        }
        // Home slices were renumbered: save them, so a later restart groups jobs right.
        self.store.begin()?;
        for id in touched {
            self.store
                .save_job(&self.jobs[&id].persisted(self.home_slice(id)))?;
        }
        self.store.commit()?;
        info!(
            adopted,
            queued,
            lost,
            total = self.jobs.len(),
            "state recovered"
        );
        self.update_gauges();
        Ok(())
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < 512 {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            if let Err(e) = self.store.begin() {
                warn!(error = %e, "cannot begin a transaction");
            }
            for cmd in batch {
                self.handle(cmd);
            }
            self.publish_table();
            if let Err(e) = self.store.commit() {
                // Replies still go out: callers of writes get the error from their
                // handler only if it failed there; a failed commit is logged loudly.
                warn!(error = %e, "commit failed: the last changes may not be durable");
            }
            for r in self.replies.drain(..) {
                r();
            }
            for e in self.pending_events.drain(..) {
                let _ = self.events.send(e);
            }
        }
        info!("state task stopped");
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Submit(req, tx) => {
                let r = self.submit(req);
                defer(&mut self.replies, tx, r);
            }
            Cmd::Cancel(job, uid, tx) => {
                let r = self.cancel(job, uid, "cancelled by user".into());
                defer(&mut self.replies, tx, r);
            }
            Cmd::GetJob(job, tx) => {
                let r = self.info(job);
                defer(&mut self.replies, tx, r);
            }
            Cmd::ListJobs(req, tx) => {
                let r = Ok(self.list(req));
                defer(&mut self.replies, tx, r);
            }
            Cmd::Rank0(job, tx) => match self.rank0(job) {
                Ok(None)
                    if self
                        .jobs
                        .get(&job)
                        .is_some_and(|j| !j.record.state.is_final()) =>
                {
                    self.rank0_waiters.entry(job).or_default().push(tx);
                }
                r => defer(&mut self.replies, tx, r),
            },
            Cmd::Register(req, tx) => {
                let r = self.register(req);
                defer(&mut self.replies, tx, r);
            }
            Cmd::Heartbeat(req, tx) => {
                let r = Ok(self.heartbeat(req));
                defer(&mut self.replies, tx, r);
            }
            Cmd::RankExit(exit, tx) => {
                self.rank_exit(exit);
                defer(&mut self.replies, tx, Ok(()));
            }
            Cmd::ListNodes(tx) => {
                let r = Ok(self.list_nodes());
                defer(&mut self.replies, tx, r);
            }
            Cmd::SetDrained(x, y, drained, tx) => {
                let r = self.set_drained(x, y, drained);
                defer(&mut self.replies, tx, r);
            }
            Cmd::Matrix(tx) => {
                let r = Ok(self.matrix());
                defer(&mut self.replies, tx, r);
            }
            Cmd::Stats(tx) => {
                let r = Ok(self.stats());
                defer(&mut self.replies, tx, r);
            }
            Cmd::TableAcked { x, y, version } => {
                if let Some(n) = self.node_mut(x, y) {
                    n.table_version = n.table_version.max(version);
                }
            }
            Cmd::Launched { job, rank, result } => self.launched(job, rank, result),
            Cmd::Tick => self.tick(),
        }
    }

    fn node_index(&self, x: u32, y: u32) -> Option<usize> {
        let m = self.cfg.mesh;
        (x < m.w && y < m.h).then(|| (y * m.w + x) as usize)
    }

    fn node_mut(&mut self, x: u32, y: u32) -> Option<&mut Node> {
        let i = self.node_index(x, y)?;
        self.nodes.get_mut(i)
    }

    fn unknown_node(&self, x: u32, y: u32) -> MasterError {
        MasterError::UnknownNode {
            x,
            y,
            w: self.cfg.mesh.w,
            h: self.cfg.mesh.h,
        }
    }

    fn slices_of(&self, job: JobId) -> Vec<u32> {
        self.sched
            .matrix()
            .placement(job)
            .map(|p| {
                std::iter::once(p.home)
                    .chain(p.extra.iter().copied())
                    .map(|s| s.0)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn home_slice(&self, job: JobId) -> Option<u32> {
        self.sched.matrix().placement(job).map(|p| p.home.0)
    }

    fn info(&self, job: JobId) -> Result<v1::JobInfo> {
        let j = self.jobs.get(&job).ok_or(MasterError::UnknownJob(job))?;
        Ok(self.job_info(j))
    }

    fn job_info(&self, j: &Job) -> v1::JobInfo {
        j.info(self.slices_of(j.id()), self.run_ns(j, now_ns()))
    }

    /// A job's run time up to `now`: accounted, plus what its tables give since.
    fn run_ns(&self, j: &Job, now: i64) -> i64 {
        if !matches!(j.record.state, State::Starting | State::Running) {
            return j.record.run_ns;
        }
        j.record.run_ns
            + self.slicer.run_ns(
                j.id(),
                j.record.gang == GangMode::None,
                j.run_accounted_to,
                now,
            )
    }

    /// Bring every running job's run time up to `now`.
    fn account_run_time(&mut self, now: i64) {
        // Placed jobs are the running ones: no scan of the whole job history per batch.
        let ids: Vec<JobId> = self.sched.matrix().placements().map(|(id, _)| id).collect();
        for id in ids {
            let Some(j) = self.jobs.get(&id) else {
                continue;
            };
            let run = self.run_ns(j, now);
            let j = self.jobs.get_mut(&id).expect("present");
            j.record.run_ns = run;
            j.run_accounted_to = now;
        }
        self.slicer.prune(now);
    }

    /// Publish a new slice table if the matrix changed: persist its version, then send
    /// each agent its view. Agents acknowledge; one that misses it gets it again when a
    /// heartbeat shows it behind, or when it registers.
    fn publish_table(&mut self) {
        // A new table takes effect after `now`, so run times accounted so far stay right;
        // the tick accounts and prunes old tables.
        let now = now_ns();
        let Some((effective, table)) = self.slicer.update(self.sched.matrix(), now) else {
            return;
        };
        let (version, rows) = (table.version, table.rows.len());
        let epoch = self.slicer.grid().map_or(0, |g| g.epoch_ns);
        let saved = self
            .store
            .set_table_version(version)
            .and_then(|_| self.store.set_table_epoch(epoch, self.slicer.quantum_ns()));
        if let Err(e) = saved {
            warn!(error = %e, "cannot save the slice table version");
        }
        self.metrics.table_version.set(version as i64);
        tracing::debug!(
            version,
            rows,
            lead_ns = effective - now,
            "slice table published"
        );
        for i in 0..self.nodes.len() {
            if self.nodes[i].up {
                self.send_table(i);
            }
        }
    }

    /// This node's view of the newest table.
    fn node_table(&self, i: usize) -> Option<v1::NodeTable> {
        let (effective, t) = self.slicer.latest()?;
        let m = self.cfg.mesh;
        let (x, y) = (i as u32 % m.w, i as u32 / m.w);
        let rows: Vec<u64> = t
            .for_node(x, y)
            .into_iter()
            .map(|j| j.map_or(0, |j| j.0))
            .collect();
        Some(v1::NodeTable {
            version: t.version,
            epoch_ns: t.grid.epoch_ns,
            quantum_ns: t.grid.quantum_ns,
            effective_ns: effective,
            rows,
        })
    }

    fn send_table(&mut self, i: usize) {
        let Some(table) = self.node_table(i) else {
            return;
        };
        let Some(addr) = self.nodes[i].address.clone() else {
            return;
        };
        let Ok(mut client) = self.agents.client(&addr) else {
            return;
        };
        self.nodes[i].table_sent = Some((table.version, Instant::now()));
        let m = self.cfg.mesh;
        let (x, y) = (i as u32 % m.w, i as u32 / m.w);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match client.set_table(table).await {
                Ok(r) => {
                    let version = r.into_inner().version;
                    let _ = tx.send(Cmd::TableAcked { x, y, version }).await;
                }
                Err(s) => {
                    tracing::debug!(node = %format!("{x},{y}"), error = %s.message(), "slice table not delivered");
                }
            }
        });
    }

    /// Persist a job and announce its new state once the batch commits.
    fn save(&mut self, job: JobId) {
        let Some(j) = self.jobs.get(&job) else { return };
        if let Err(e) = self.store.save_job(&j.persisted(self.home_slice(job))) {
            warn!(job = %job, error = %e, "cannot save job");
        }
        let info = self.job_info(j);
        self.pending_events.push(info);
    }

    fn validate(&self, req: &v1::SubmitRequest) -> Result<(v1::JobSpec, Shape)> {
        let spec = req
            .spec
            .clone()
            .ok_or_else(|| MasterError::Invalid("the request has no job spec".into()))?;
        if spec.argv.first().is_none_or(|a| a.is_empty()) {
            return Err(MasterError::Invalid("the command is empty".into()));
        }
        if !spec.cwd.starts_with('/') {
            return Err(MasterError::Invalid(format!(
                "the working directory must be an absolute path, got {:?}",
                spec.cwd
            )));
        }
        if v1::GangMode::try_from(spec.gang).is_err() {
            return Err(MasterError::Invalid(format!(
                "unknown gang mode {}: expected stop, priority, none or freeze",
                spec.gang
            )));
        }
        let shape = spec.shape.parse::<Request>()?.resolve(self.cfg.mesh)?;
        self.sched.validate(JobId(self.next_id), shape)?;
        Ok((spec, shape))
    }

    fn submit(&mut self, req: v1::SubmitRequest) -> Result<v1::JobInfo> {
        let (spec, shape) = self.validate(&req)?;
        let gang = v1::GangMode::try_from(spec.gang)
            .ok()
            .and_then(GangMode::from_proto)
            .unwrap_or(self.cfg.gang_mode);
        let id = JobId(self.next_id);
        let name = if spec.name.is_empty() {
            spec.argv[0].clone()
        } else {
            spec.name.clone()
        };
        let record = JobRecord {
            id: id.0,
            user: req.user,
            uid: req.uid,
            gid: req.gid,
            name,
            argv: spec.argv,
            cwd: spec.cwd,
            env: spec.env.into_iter().collect(),
            time_limit_s: spec.time_limit_s,
            stdin: spec.stdin,
            shape: spec.shape,
            w: shape.w,
            h: shape.h,
            state: State::Queued,
            submesh: None,
            exit_code: None,
            reason: String::new(),
            submit_ns: now_ns(),
            start_ns: 0,
            end_ns: 0,
            gang,
            run_ns: 0,
            live: None,
        };
        let job = Job::new(record);
        self.store.save_job(&job.persisted(None))?;
        self.next_id += 1;
        self.jobs.insert(id, job);
        self.metrics.jobs_submitted.inc();
        let estimate = (spec.time_limit_s > 0).then_some(spec.time_limit_s as f64);
        let plan = self.sched.submit(
            now_s(),
            JobSpec {
                id,
                shape,
                estimate,
            },
        )?;
        self.save(id);
        self.execute(plan);
        self.info(id)
    }

    /// Carry out a plan of the core.
    fn execute(&mut self, plan: Plan) {
        for d in plan.decisions {
            match d {
                Decision::Start { job, submesh, .. } => self.launch(job, submesh),
                // Slice bookkeeping lives in the core; agents learn of slots through slice
                // tables (issue #4). Nothing to carry out here yet.
                Decision::NewSlice { .. }
                | Decision::AddSlot { .. }
                | Decision::RemoveSlot { .. }
                | Decision::DropSlice { .. }
                | Decision::Reserve { .. }
                | Decision::Free { .. } => {}
            }
        }
        self.update_gauges();
    }

    fn launch(&mut self, id: JobId, submesh: gang_core::Submesh) {
        let Some(job) = self
            .jobs
            .get_mut(&id)
            .filter(|j| !j.record.state.is_final())
        else {
            return;
        };
        job.record.state = State::Starting;
        job.record.submesh = Some(submesh);
        job.record.start_ns = now_ns();
        job.run_accounted_to = job.record.start_ns;
        job.ranks = vec![Rank::Pending; job.size() as usize];
        self.placed_at.insert(id, Instant::now());
        let size = job.size();
        let mut down = vec![];
        for rank in 0..size {
            let (x, y) = job.node_of(rank).expect("placed");
            let i = (y * self.cfg.mesh.w + x) as usize;
            let node = &self.nodes[i];
            let Some(addr) = node.address.clone().filter(|_| node.up) else {
                down.push((rank, x, y));
                continue;
            };
            let mut env: HashMap<String, String> = job.record.env.clone().into_iter().collect();
            env.remove("GANG_MASTER");
            let req = v1::LaunchRequest {
                job_id: id.0,
                rank,
                size,
                argv: job.record.argv.clone(),
                cwd: job.record.cwd.clone(),
                env,
                uid: job.record.uid,
                gid: job.record.gid,
                stdin: job.record.stdin && rank == 0,
                gang: job.record.gang.proto() as i32,
            };
            let client = self.agents.client(&addr);
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let result = match client {
                    Ok(mut c) => c
                        .launch(req)
                        .await
                        .map(|r| r.into_inner().pid)
                        .map_err(|s| status_message(&s, x, y)),
                    Err(e) => Err(format!("node ({x},{y}): bad agent address: {e}")),
                };
                let _ = tx
                    .send(Cmd::Launched {
                        job: id,
                        rank,
                        result,
                    })
                    .await;
            });
        }
        self.save(id);
        for (rank, x, y) in down {
            self.rank_gone(id, rank, format!("node ({x},{y}) is down"));
        }
    }

    /// Every rank has started (it runs, or already ran to its end): the job is running.
    /// Also answers those waiting for rank 0.
    fn note_started(&mut self, id: JobId) {
        if let Some(waiters) = self.rank0_waiters.remove(&id) {
            match self.rank0(id) {
                Ok(Some(addr)) => {
                    for tx in waiters {
                        defer(&mut self.replies, tx, Ok(Some(addr.clone())));
                    }
                }
                _ => {
                    self.rank0_waiters.insert(id, waiters);
                }
            }
        }
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let started = job
            .ranks
            .iter()
            .all(|r| matches!(r, Rank::Running | Rank::Exited(_)));
        if started
            && job.record.state == State::Starting
            && job.failure.is_none()
            && job.cancelled.is_none()
        {
            job.record.state = State::Running;
            if let Some(t) = self.placed_at.remove(&id) {
                self.metrics
                    .launch_seconds
                    .observe(t.elapsed().as_secs_f64());
            }
            self.save(id);
        }
    }

    fn launched(&mut self, id: JobId, rank: u32, result: std::result::Result<u32, String>) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.record.state.is_final() {
            return;
        }
        let Some(slot) = job.ranks.get_mut(rank as usize) else {
            return;
        };
        match result {
            Ok(_pid) if *slot == Rank::Pending => {
                *slot = Rank::Running;
                if job.failure.is_some() || job.cancelled.is_some() {
                    // Started after the job was already being torn down.
                    let node = job.node_of(rank);
                    if let Some((x, y)) = node {
                        self.signal_node(id, x, y, 0);
                    }
                }
                self.note_started(id);
            }
            Ok(_) => {}
            Err(msg) => self.rank_gone(id, rank, msg),
        }
    }

    /// A rank will never run (it could not start, or its node is lost): fail the job.
    fn rank_gone(&mut self, id: JobId, rank: u32, reason: String) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if let Some(slot) = job.ranks.get_mut(rank as usize)
            && !slot.is_done()
        {
            *slot = Rank::Gone;
        }
        job.fail(None, reason);
        self.kill(id, 0);
        self.maybe_finish(id);
    }

    /// Stop every rank of a job that may still run: SIGTERM, then SIGKILL after `grace_ms`.
    fn kill(&mut self, id: JobId, grace_ms: u32) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let targets: Vec<(u32, u32)> = (0..job.ranks.len() as u32)
            .filter(|&r| !job.ranks[r as usize].is_done())
            .filter_map(|r| job.node_of(r))
            .collect();
        for (x, y) in targets {
            self.signal_node(id, x, y, grace_ms);
        }
    }

    fn signal_node(&self, id: JobId, x: u32, y: u32, grace_ms: u32) {
        let Some(i) = self.node_index(x, y) else {
            return;
        };
        let Some(addr) = self.nodes[i].address.clone() else {
            return;
        };
        let Ok(mut client) = self.agents.client(&addr) else {
            return;
        };
        tokio::spawn(async move {
            let req = v1::SignalRequest {
                job_id: id.0,
                grace_ms,
            };
            if let Err(s) = client.signal(req).await {
                warn!(job = %id, node = %format!("{x},{y}"), error = %s.message(), "signal failed");
            }
        });
    }

    fn rank_exit(&mut self, exit: v1::RankExit) {
        let id = JobId(exit.job_id);
        let Some(job) = self.jobs.get_mut(&id) else {
            warn!(job = %id, "exit report for an unknown job");
            return;
        };
        let (x, y) = (exit.x, exit.y);
        let Some(slot) = job.ranks.get_mut(exit.rank as usize) else {
            return;
        };
        if slot.is_done() {
            return;
        }
        let (code, what) = match exit.how {
            Some(v1::rank_exit::How::Code(c)) => (c, format!("exited with code {c}")),
            Some(v1::rank_exit::How::Signal(s)) => {
                (signal_code(s), format!("was killed by signal {s}"))
            }
            Some(v1::rank_exit::How::Error(e)) => (127, e),
            None => (1, "ended for an unknown reason".into()),
        };
        *slot = Rank::Exited(code);
        self.note_started(id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if code != 0 {
            job.fail(
                Some(code),
                format!("rank {} on node ({x},{y}) {what}", exit.rank),
            );
            let grace = self.cfg.kill_grace_ms;
            self.kill(id, grace);
        }
        self.maybe_finish(id);
    }

    /// When every rank is done: the job's final state, its exit code, and its nodes back.
    fn maybe_finish(&mut self, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.record.state.is_final() || !job.all_ranks_done() {
            return;
        }
        let now = now_ns();
        let job = &self.jobs[&id];
        let run = self.run_ns(job, now);
        let job = self.jobs.get_mut(&id).expect("present");
        job.record.run_ns = run;
        job.run_accounted_to = now;
        let (state, code, reason) = match (&job.cancelled, &job.failure) {
            (Some(why), f) => (State::Cancelled, f.as_ref().and_then(|f| f.0), why.clone()),
            (None, Some((code, why))) => (State::Failed, *code, why.clone()),
            (None, None) => (State::Completed, Some(0), String::new()),
        };
        job.record.state = state;
        job.record.exit_code = code;
        job.record.reason = reason;
        job.record.end_ns = now_ns();
        self.adopted.remove(&id);
        self.placed_at.remove(&id);
        for tx in self.rank0_waiters.remove(&id).unwrap_or_default() {
            defer(&mut self.replies, tx, Ok(None));
        }
        self.metrics.finished(state);
        self.save(id);
        match self.sched.finish(now_s(), id) {
            Ok(plan) => self.execute(plan),
            Err(e) => warn!(job = %id, error = %e, "scheduler did not know the finished job"),
        }
    }

    fn cancel(&mut self, id: JobId, uid: u32, reason: String) -> Result<v1::JobInfo> {
        let job = self.jobs.get_mut(&id).ok_or(MasterError::UnknownJob(id))?;
        if uid != 0 && uid != job.record.uid {
            return Err(MasterError::NotOwner {
                job: id,
                owner: job.record.uid,
                caller: uid,
                action: "cancel",
            });
        }
        match job.record.state {
            State::Queued => {
                job.record.state = State::Cancelled;
                job.record.reason = reason;
                job.record.end_ns = now_ns();
                for tx in self.rank0_waiters.remove(&id).unwrap_or_default() {
                    defer(&mut self.replies, tx, Ok(None));
                }
                self.metrics.finished(State::Cancelled);
                self.save(id);
                let plan = self.sched.finish(now_s(), id)?;
                self.execute(plan);
            }
            State::Starting | State::Running if job.cancelled.is_none() => {
                job.cancelled = Some(reason);
                // Durable before the reply: a master restart carries the cancel on.
                self.save(id);
                let grace = self.cfg.kill_grace_ms;
                self.kill(id, grace);
            }
            _ => {}
        }
        self.info(id)
    }

    fn list(&self, req: v1::ListJobsRequest) -> Vec<v1::JobInfo> {
        let limit = if req.limit == 0 {
            1000
        } else {
            req.limit as usize
        };
        self.jobs
            .values()
            .rev()
            .filter(|j| {
                req.states.is_empty() || req.states.contains(&(j.record.state.proto() as i32))
            })
            .take(limit)
            .map(|j| self.job_info(j))
            .collect()
    }

    fn rank0(&self, id: JobId) -> Result<Option<String>> {
        let job = self.jobs.get(&id).ok_or(MasterError::UnknownJob(id))?;
        if job.ranks.first() != Some(&Rank::Running) {
            return Ok(None);
        }
        let (x, y) = job.node_of(0).expect("running jobs are placed");
        Ok(self
            .node_index(x, y)
            .and_then(|i| self.nodes[i].address.clone()))
    }

    fn register(&mut self, req: v1::RegisterRequest) -> Result<v1::RegisterResponse> {
        let (x, y) = (req.x, req.y);
        let i = self
            .node_index(x, y)
            .ok_or_else(|| self.unknown_node(x, y))?;
        let was_up = self.nodes[i].up;
        let node = &mut self.nodes[i];
        node.address = Some(req.address.clone());
        node.up = true;
        node.last_heartbeat = Instant::now();
        node.last_heartbeat_ns = now_ns();
        let drained = node.drained;
        info!(node = %format!("{x},{y}"), address = %req.address, was_up, "agent registered");
        // Ranks the agent still runs: known running jobs get them back; others are killed.
        let mut kill_jobs = vec![];
        for r in &req.running {
            let id = JobId(r.job_id);
            match self.jobs.get_mut(&id) {
                Some(job) if !job.record.state.is_final() && job.rank_on(x, y) == Some(r.rank) => {
                    let Some(slot) = job.ranks.get_mut(r.rank as usize) else {
                        continue;
                    };
                    if *slot == Rank::Pending {
                        *slot = Rank::Running;
                    }
                    // Counted lost while the node was away, or the job is being torn down
                    // (it failed or was cancelled, perhaps before a master restart).
                    let doomed = slot.is_done() || job.failure.is_some() || job.cancelled.is_some();
                    self.note_started(id);
                    if doomed {
                        kill_jobs.push(r.job_id);
                    }
                }
                _ => kill_jobs.push(r.job_id),
            }
        }
        // Ranks believed running here that the agent does not list: it restarted (its ranks
        // died with it) or they exited and the report is still on its way. Give them the
        // same grace as after a master restart, then count them lost.
        let listed: Vec<(u64, u32)> = req.running.iter().map(|r| (r.job_id, r.rank)).collect();
        let now = Instant::now();
        for job in self
            .jobs
            .values_mut()
            .filter(|j| !j.record.state.is_final())
        {
            if let Some(rank) = job.rank_on(x, y)
                && job.ranks.get(rank as usize) == Some(&Rank::Running)
                && !listed.contains(&(job.record.id, rank))
            {
                job.ranks[rank as usize] = Rank::Pending;
                self.adopted.entry(job.id()).or_insert(now);
            }
        }
        if !drained {
            let plan = self.sched.set_node_offline(now_s(), x, y, false)?;
            self.execute(plan);
        }
        // A new table for the changes above goes out after the batch; this one brings the
        // agent up to date now (it may have missed tables while away).
        self.nodes[i].table_version = 0;
        self.send_table(i);
        Ok(v1::RegisterResponse {
            mesh_w: self.cfg.mesh.w,
            mesh_h: self.cfg.mesh.h,
            heartbeat_ms: self.cfg.heartbeat_ms,
            kill_jobs,
        })
    }

    fn heartbeat(&mut self, req: v1::HeartbeatRequest) -> v1::HeartbeatResponse {
        let Some(i) = self.node_index(req.x, req.y).filter(|&i| self.nodes[i].up) else {
            return v1::HeartbeatResponse { known: false };
        };
        let n = &mut self.nodes[i];
        n.last_heartbeat = Instant::now();
        n.last_heartbeat_ns = now_ns();
        n.clock_offset_ns = req.clock_offset_ns;
        n.clock_error_ns = req.clock_error_ns;
        n.clock_from_host = req.clock_from_host;
        n.table_version = req.table_version;
        // Ranks the agent still runs that should not run: their job ended, or they were
        // counted lost while the node was silent. Killed until they are gone.
        let (x, y) = (req.x, req.y);
        for r in &req.running {
            let id = JobId(r.job_id);
            let stray = self.jobs.get(&id).is_none_or(|j| {
                j.record.state.is_final()
                    || j.ranks
                        .get(r.rank as usize)
                        .is_none_or(|s| *s == Rank::Gone)
            });
            if stray {
                warn!(job = %id, rank = r.rank, node = %format!("{x},{y}"), "killing a rank that should not run");
                self.signal_node(id, x, y, 0);
            }
        }
        let n = &mut self.nodes[i];
        let latest = self.slicer.latest().map_or(0, |(_, t)| t.version);
        let resend = req.table_version < latest
            && n.table_sent
                .is_none_or(|(v, at)| v < latest || at.elapsed() > TABLE_RESEND);
        if resend {
            self.send_table(i);
        }
        v1::HeartbeatResponse { known: true }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let timeout = Duration::from_millis(self.cfg.node_timeout_ms as u64);
        // Silent agents: their nodes are down and their jobs fail.
        let mesh = self.cfg.mesh;
        for i in 0..self.nodes.len() {
            if self.nodes[i].up && now.duration_since(self.nodes[i].last_heartbeat) > timeout {
                let (x, y) = (i as u32 % mesh.w, i as u32 / mesh.w);
                warn!(node = %format!("{x},{y}"), "agent silent: node down");
                self.nodes[i].up = false;
                if let Ok(plan) = self.sched.set_node_offline(now_s(), x, y, true) {
                    self.execute(plan);
                }
                let hit: Vec<(JobId, u32)> = self
                    .jobs
                    .values()
                    .filter(|j| !j.record.state.is_final())
                    .filter_map(|j| j.rank_on(x, y).map(|r| (j.id(), r)))
                    .filter(|&(id, r)| {
                        self.jobs[&id]
                            .ranks
                            .get(r as usize)
                            .is_some_and(|s| !s.is_done())
                    })
                    .collect();
                for (id, rank) in hit {
                    let ms = timeout.as_millis();
                    self.rank_gone(
                        id,
                        rank,
                        format!("node ({x},{y}) lost: its agent was silent for {ms} ms"),
                    );
                }
            }
        }
        // Ranks of adopted jobs that no agent reported back.
        let overdue: Vec<JobId> = self
            .adopted
            .iter()
            .filter(|(_, t)| now.duration_since(**t) > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in overdue {
            self.adopted.remove(&id);
            let missing: Vec<u32> = self.jobs.get(&id).map_or(vec![], |j| {
                (0..j.ranks.len() as u32)
                    .filter(|&r| j.ranks[r as usize] == Rank::Pending)
                    .collect()
            });
            for rank in missing {
                let (x, y) = self.jobs[&id].node_of(rank).expect("placed");
                self.rank_gone(
                    id,
                    rank,
                    format!("rank {rank} on node ({x},{y}) was not found after a master or agent restart"),
                );
            }
        }
        // Time limits count the time a job was scheduled to run, not time spent stopped.
        self.account_run_time(now_ns());
        let limited: Vec<(JobId, u64)> = self
            .jobs
            .values()
            .filter(|j| {
                matches!(j.record.state, State::Starting | State::Running) && j.cancelled.is_none()
            })
            .filter(|j| j.record.time_limit_s > 0)
            .filter(|j| j.record.run_ns > j.record.time_limit_s as i64 * 1_000_000_000)
            .map(|j| (j.id(), j.record.time_limit_s))
            .collect();
        if self.run_saved.elapsed() > RUN_SAVE_EVERY {
            self.run_saved = Instant::now();
            for j in self
                .jobs
                .values()
                .filter(|j| matches!(j.record.state, State::Starting | State::Running))
            {
                if let Err(e) = self.store.save_job(&j.persisted(self.home_slice(j.id()))) {
                    warn!(job = %j.id(), error = %e, "cannot save the run time");
                }
            }
        }
        for (id, limit) in limited {
            let _ = self.cancel(id, 0, format!("time limit of {limit} s reached"));
        }
    }

    fn node_info(&self, i: usize) -> v1::NodeInfo {
        let m = self.cfg.mesh;
        let (x, y) = (i as u32 % m.w, i as u32 / m.w);
        let n = &self.nodes[i];
        let state = match (n.up, n.drained) {
            (false, _) => v1::NodeState::Down,
            (true, true) => v1::NodeState::Drained,
            (true, false) => v1::NodeState::Up,
        };
        let jobs = self
            .jobs
            .values()
            .filter(|j| !j.record.state.is_final() && j.rank_on(x, y).is_some())
            .map(|j| j.record.id)
            .collect();
        v1::NodeInfo {
            x,
            y,
            state: state as i32,
            address: n.address.clone().unwrap_or_default(),
            jobs,
            clock_offset_ns: n.clock_offset_ns,
            clock_error_ns: n.clock_error_ns,
            last_heartbeat_ns: n.last_heartbeat_ns,
            clock_from_host: n.clock_from_host,
            table_version: n.table_version,
        }
    }

    fn list_nodes(&self) -> v1::ListNodesResponse {
        v1::ListNodesResponse {
            mesh_w: self.cfg.mesh.w,
            mesh_h: self.cfg.mesh.h,
            nodes: (0..self.nodes.len()).map(|i| self.node_info(i)).collect(),
        }
    }

    fn set_drained(&mut self, x: u32, y: u32, drained: bool) -> Result<v1::NodeInfo> {
        let i = self
            .node_index(x, y)
            .ok_or_else(|| self.unknown_node(x, y))?;
        self.store.set_drained(x, y, drained)?;
        self.nodes[i].drained = drained;
        let offline = drained || !self.nodes[i].up;
        let plan = self.sched.set_node_offline(now_s(), x, y, offline)?;
        self.execute(plan);
        Ok(self.node_info(i))
    }

    fn matrix(&self) -> v1::Matrix {
        let now = now_ns();
        let in_force = self.slicer.in_force(now);
        let (table_version, epoch_ns, quantum_ns, effective_ns, row_slices, running_row) =
            match in_force {
                Some((e, t)) => (
                    t.version,
                    t.grid.epoch_ns,
                    t.grid.quantum_ns,
                    e,
                    t.rows.iter().map(|r| r.slice).collect(),
                    t.row_at(now).map(|r| r as u32),
                ),
                None => (0, 0, 0, 0, vec![], None),
            };
        let m = self.sched.matrix();
        v1::Matrix {
            mesh_w: self.cfg.mesh.w,
            mesh_h: self.cfg.mesh.h,
            mpl: self.cfg.mpl,
            slices: m
                .slices()
                .iter()
                .map(|s| v1::SliceInfo {
                    id: s.id.0,
                    placements: s
                        .jobs()
                        .iter()
                        .map(|&(job, role)| v1::Placement {
                            job_id: job.0,
                            submesh: m.placement(job).map(|p| p.submesh.into()),
                            home: role == gang_core::Role::Home,
                        })
                        .collect(),
                })
                .collect(),
            queue: self.sched.queue().map(|q| q.id.0).collect(),
            table_version,
            epoch_ns,
            quantum_ns,
            effective_ns,
            row_slices,
            now_ns: now,
            running_row,
        }
    }

    fn stats(&self) -> v1::Stats {
        let now = now_ns();
        let mut st = {
            let mut s = self.stats.lock().expect("switch stats lock");
            s.close(now);
            s.snapshot()
        };
        st.table_version = self.slicer.in_force(now).map_or(0, |(_, t)| t.version);
        st.quantum_ns = self.slicer.quantum_ns();
        st
    }

    fn update_gauges(&self) {
        self.metrics
            .jobs_queued
            .set(self.sched.queue().len() as i64);
        self.metrics
            .jobs_running
            .set(self.sched.matrix().running() as i64);
        self.metrics
            .slices
            .set(self.sched.matrix().slices().len() as i64);
        self.metrics
            .nodes_up
            .set(self.nodes.iter().filter(|n| n.up).count() as i64);
    }
}

/// An agent's error message already names its node; a transport error does not.
fn status_message(s: &tonic::Status, x: u32, y: u32) -> String {
    let prefix = format!("node ({x},{y})");
    if s.message().starts_with(&prefix) {
        s.message().to_string()
    } else {
        format!("{prefix}: {}", s.message())
    }
}
