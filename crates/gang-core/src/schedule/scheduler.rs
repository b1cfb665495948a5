//! The scheduler itself: the queue, placement into the slice matrix, and progress under
//! time sharing (see the module above for the policy).

use std::collections::{BTreeMap, VecDeque};

use super::config::{Backfill, Config, JobSpec, SchedError};
use crate::mesh::{Mesh, Shape, Submesh};
use crate::place::Placer;
use crate::plan::{Decision, JobId, Plan, SliceId};
use crate::time::matrix::SliceMatrix;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Progress {
    pub(super) started: f64,
    /// Seconds of full-speed work done so far.
    pub(super) work: f64,
    pub(super) estimate: Option<f64>,
    pub(super) user: u32,
}

/// Why a queued job waits (Slurm's pending reasons, in the terms of this scheduler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Out-of-service nodes keep it out of even an empty slice; this one is among them
    /// (its return alone would let the job in, when one such node exists).
    Node { x: u32, y: u32 },
    /// Another job is ahead of it (FCFS: nothing overtakes the head).
    Priority(JobId),
    /// It is the head, and no slice has room for it now (nor may a new one open).
    Resources,
}

/// A reservation for the head of the queue (EASY).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reservation {
    pub job: JobId,
    pub at: f64,
    pub slice: SliceId,
    pub submesh: Submesh,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    pub(super) cfg: Config,
    pub(super) matrix: SliceMatrix,
    pub(super) queue: VecDeque<JobSpec>,
    pub(super) progress: BTreeMap<JobId, Progress>,
    pub(super) now: f64,
    pub(super) last_reservation: Option<(JobId, f64)>,
    /// The head found blocked by the last pass: while no nodes are freed it stays blocked,
    /// so the next pass need not search for it again.
    pub(super) blocked_head: Option<JobId>,
    /// Jobs started so far, and the count when each user last had one started (fair
    /// share's turns).
    pub(super) starts: u64,
    pub(super) last_start: std::collections::HashMap<u32, u64>,
}

impl Scheduler {
    pub fn new(mesh: Mesh, cfg: Config) -> Result<Self, SchedError> {
        if mesh.w == 0 || mesh.h == 0 {
            return Err(SchedError::Config(format!(
                "the mesh must have nodes, got {mesh}"
            )));
        }
        if cfg.mpl == 0 {
            return Err(SchedError::Config("mpl must be at least 1".into()));
        }
        if !(0.0..1.0).contains(&cfg.switch_overhead) {
            return Err(SchedError::Config(format!(
                "switch overhead must be in [0, 1), got {}",
                cfg.switch_overhead
            )));
        }
        Ok(Scheduler {
            cfg,
            matrix: SliceMatrix::new(mesh),
            queue: VecDeque::new(),
            progress: BTreeMap::new(),
            now: f64::NEG_INFINITY,
            last_reservation: None,
            blocked_head: None,
            starts: 0,
            last_start: Default::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn mesh(&self) -> Mesh {
        self.matrix.mesh()
    }

    pub fn matrix(&self) -> &SliceMatrix {
        &self.matrix
    }

    pub fn queue(&self) -> impl ExactSizeIterator<Item = &JobSpec> {
        self.queue.iter()
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    pub(super) fn placer(&self) -> &'static dyn Placer {
        self.cfg.placer.get()
    }

    /// Whether `shape` can ever run on this mesh with this placer.
    pub fn validate(&self, job: JobId, shape: Shape) -> Result<(), SchedError> {
        if shape.w > 0 && shape.h > 0 && self.placer().can_ever_fit(self.mesh(), shape) {
            Ok(())
        } else {
            Err(SchedError::NeverFits {
                job,
                shape,
                mesh: self.mesh(),
                placer: self.cfg.placer,
            })
        }
    }

    /// Queue a job and schedule.
    pub fn submit(&mut self, now: f64, spec: JobSpec) -> Result<Plan, SchedError> {
        self.validate(spec.id, spec.shape)?;
        if self.progress.contains_key(&spec.id) || self.queue.iter().any(|q| q.id == spec.id) {
            return Err(SchedError::Duplicate(spec.id));
        }
        self.advance(now)?;
        self.queue.push_back(spec);
        Ok(self.schedule())
    }

    /// A job's requested run time changed (its time limit was updated): its place in the
    /// queue, or its progress if it runs, keeps the new one for backfilling. `false`: the
    /// scheduler does not have the job.
    pub fn set_estimate(&mut self, job: JobId, estimate: Option<f64>) -> bool {
        // Backfill decisions depend on estimates: the next pass looks at the head afresh.
        self.blocked_head = None;
        if let Some(q) = self.queue.iter_mut().find(|q| q.id == job) {
            q.estimate = estimate;
            return true;
        }
        if let Some(p) = self.progress.get_mut(&job) {
            p.estimate = estimate;
            return true;
        }
        false
    }

    /// A job ended (it exited, failed or was cancelled): free it, or take it out of the
    /// queue if it never started; then schedule.
    pub fn finish(&mut self, now: f64, job: JobId) -> Result<Plan, SchedError> {
        self.advance(now)?;
        let mut out = vec![];
        if self.matrix.remove(job, &mut out).is_some() {
            self.progress.remove(&job);
        } else if let Some(i) = self.queue.iter().position(|q| q.id == job) {
            self.queue.remove(i);
        } else {
            return Err(SchedError::UnknownJob(job));
        }
        let mut plan = self.schedule();
        out.append(&mut plan.decisions);
        plan.decisions = out;
        Ok(plan)
    }

    /// Put back a job that is already running at `submesh` (a restarted master finding its
    /// jobs again): into the first slice where those nodes are free, else a new slice.
    pub fn adopt(&mut self, now: f64, spec: JobSpec, submesh: Submesh) -> Result<Plan, SchedError> {
        self.validate(spec.id, spec.shape)?;
        if self.progress.contains_key(&spec.id) || self.queue.iter().any(|q| q.id == spec.id) {
            return Err(SchedError::Duplicate(spec.id));
        }
        if !submesh.within(self.mesh()) || !spec.shape.fits_in_rotating(submesh.shape()) {
            return Err(SchedError::CannotAdopt {
                job: spec.id,
                submesh,
            });
        }
        self.advance(now)?;
        let mut out = vec![];
        let slice = match self
            .matrix
            .slices()
            .iter()
            .find(|s| s.home_occupancy().is_free(submesh))
        {
            Some(s) => s.id,
            None if self.matrix.slices().len() < self.cfg.mpl as usize => {
                self.matrix.open_slice(&mut out)
            }
            None => {
                return Err(SchedError::CannotAdopt {
                    job: spec.id,
                    submesh,
                });
            }
        };
        self.start(&spec, slice, submesh, &mut out);
        let mut plan = self.schedule();
        out.append(&mut plan.decisions);
        plan.decisions = out;
        Ok(plan)
    }

    /// Take a node out of service for new jobs (drained, or its agent is down), or put it
    /// back; jobs already on it are the caller's business. Then schedule.
    pub fn set_node_offline(
        &mut self,
        now: f64,
        x: u32,
        y: u32,
        offline: bool,
    ) -> Result<Plan, SchedError> {
        let mesh = self.mesh();
        if x >= mesh.w || y >= mesh.h {
            return Err(SchedError::NoSuchNode { x, y, mesh });
        }
        self.advance(now)?;
        if self.matrix.set_offline(x, y, offline) && !offline {
            // Room appeared even where no slice exists yet: look at the head again.
            self.blocked_head = None;
        }
        Ok(self.schedule())
    }

    /// Why a queued job waits, or `None` if `job` is not queued.
    pub fn pending(&self, job: JobId) -> Option<Pending> {
        let pos = self.queue.iter().position(|q| q.id == job)?;
        self.pending_at(pos, self.head_index())
    }

    /// Why each queued job waits, head first: the effective head is found once, not once
    /// per job (with nodes out of service that search runs the placer over the queue).
    pub fn pending_all(&self) -> Vec<(JobId, Pending)> {
        let head = self.head_index();
        (0..self.queue.len())
            .filter_map(|pos| Some((self.queue[pos].id, self.pending_at(pos, head)?)))
            .collect()
    }

    /// [`Self::pending`] of the job at `pos` in the queue, given the effective head.
    fn pending_at(&self, pos: usize, head: Option<usize>) -> Option<Pending> {
        let placer = self.placer();
        let shape = self.queue[pos].shape;
        if self.matrix.find_in_new_slice(placer, shape).is_none() {
            // Held: offline nodes keep it out of even an empty slice. Name a node whose
            // return alone would let it in, so the user knows which one to ask about.
            let off = self.matrix.offline();
            let mesh = self.mesh();
            let nodes = (0..mesh.h).flat_map(|y| (0..mesh.w).map(move |x| (x, y)));
            let offline: Vec<(u32, u32)> = nodes.filter(|&(x, y)| off.is_busy(x, y)).collect();
            let key = offline
                .iter()
                .copied()
                .find(|&(x, y)| {
                    let mut o = off.clone();
                    o.release(Submesh::new(x, y, 1, 1));
                    placer.find(&o, shape).is_some()
                })
                .or(offline.first().copied());
            return Some(key.map_or(Pending::Resources, |(x, y)| Pending::Node { x, y }));
        }
        match head {
            Some(h) if h < pos => Some(Pending::Priority(self.queue[h].id)),
            _ => Some(Pending::Resources),
        }
    }

    /// Move the clock to `now` without any other change (progress accrues).
    pub fn advance(&mut self, now: f64) -> Result<(), SchedError> {
        if now < self.now {
            return Err(SchedError::TimeWentBack {
                now,
                last: self.now,
            });
        }
        if self.now.is_finite() {
            let dt = now - self.now;
            if dt > 0.0 {
                let k = self.matrix.slices().len();
                for (job, p) in self.matrix.placements() {
                    let rate = self.rate_of(p.slots(), k);
                    self.progress
                        .get_mut(&job)
                        .expect("running job has progress")
                        .work += dt * rate;
                }
            }
        }
        self.now = now;
        Ok(())
    }

    fn rate_of(&self, slots: usize, k: usize) -> f64 {
        if k <= 1 {
            1.0
        } else {
            slots as f64 / k as f64 * (1.0 - self.cfg.switch_overhead)
        }
    }

    /// Fraction of full speed at which `job` runs now.
    pub fn rate(&self, job: JobId) -> Option<f64> {
        let p = self.matrix.placement(job)?;
        Some(self.rate_of(p.slots(), self.matrix.slices().len()))
    }

    /// Seconds of full-speed work `job` has done (as of the last call).
    pub fn work_done(&self, job: JobId) -> Option<f64> {
        self.progress.get(&job).map(|p| p.work)
    }

    pub fn started_at(&self, job: JobId) -> Option<f64> {
        self.progress.get(&job).map(|p| p.started)
    }

    /// The slowest rate any running job can have while the head waits (one slot of `k`).
    pub(super) fn min_rate(&self) -> f64 {
        self.rate_of(1, self.matrix.slices().len())
    }

    pub(super) fn start(
        &mut self,
        spec: &JobSpec,
        slice: SliceId,
        sm: Submesh,
        out: &mut Vec<Decision>,
    ) {
        self.matrix.start(spec.id, slice, sm, out);
        self.starts += 1;
        self.last_start.insert(spec.user, self.starts);
        self.progress.insert(
            spec.id,
            Progress {
                started: self.now,
                work: 0.0,
                estimate: spec.estimate,
                user: spec.user,
            },
        );
    }

    /// The queue's effective head: the first job that could run on the nodes in service.
    /// Jobs that offline nodes keep out of even an empty mesh are held, not heads: they
    /// would block everyone behind them for as long as a node is down or drained.
    pub(super) fn head_index(&self) -> Option<usize> {
        if self.matrix.offline().busy() == 0 {
            return (!self.queue.is_empty()).then_some(0);
        }
        let placer = self.placer();
        self.queue
            .iter()
            .position(|q| self.matrix.find_in_new_slice(placer, q.shape).is_some())
    }

    fn schedule(&mut self) -> Plan {
        let mut out = vec![];
        if self.cfg.fair_share {
            let mut running: std::collections::HashMap<u32, usize> = Default::default();
            for p in self.progress.values() {
                *running.entry(p.user).or_default() += 1;
            }
            crate::schedule::fair_share::order(
                &mut self.queue,
                |j| (j.id, j.user),
                &running,
                &self.last_start,
            );
        }
        let placer = self.placer();
        let unchanged = !self.matrix.has_fresh_space()
            && self.head_index().map(|h| self.queue[h].id) == self.blocked_head;
        if !unchanged {
            while let Some(h) = self.head_index() {
                let head = &self.queue[h];
                let spot = match self.matrix.find(placer, head.shape, self.cfg.slice_choice) {
                    Some(spot) => spot,
                    None if self.matrix.slices().len() < self.cfg.mpl as usize => {
                        // Offline nodes may keep it out of even an empty slice.
                        match self.matrix.find_in_new_slice(placer, head.shape) {
                            Some(sm) => (self.matrix.open_slice(&mut out), sm),
                            None => break,
                        }
                    }
                    None => break,
                };
                let head = self.queue.remove(h).expect("head index in range");
                self.start(&head, spot.0, spot.1, &mut out);
            }
        }
        let head = self.head_index();
        if self.cfg.backfill == Backfill::Easy
            && let Some(h) = head
            && self.queue.len() > h + 1
        {
            // Always a full pass: as time passes the reservation may move to other nodes,
            // so a job refused a moment ago may fit now even though no node was freed.
            self.backfill(h, &mut out);
        }
        self.blocked_head = self.head_index().map(|h| self.queue[h].id);
        if self.queue.is_empty() {
            self.last_reservation = None;
        }
        if self.cfg.multiple_tasks {
            self.matrix.fill_extra_slots(&mut out);
        } else {
            self.matrix.clear_fresh();
        }
        Plan {
            now: self.now,
            decisions: out,
        }
    }
}
