//! Read-only views of the state, in domain terms (converted to protobuf at the gRPC edge).

use gang_core::{JobId, Pending, Role};

use crate::error::{MasterError, Result};
use crate::job::{Job, Rank, State};
use crate::state::events::{Caller, ListFilter};
use crate::state::views::{
    JobView, MatrixView, NodeState, NodeView, NodesView, PlacementView, Rank0, SliceView,
    TableInForce,
};
use crate::state::{MasterState, Now};

/// A listing shows at most this many jobs unless asked for fewer.
const DEFAULT_LIST_LIMIT: usize = 1000;

impl MasterState {
    /// Slice ids the job holds, home first (empty unless it is placed).
    pub(super) fn slices_of(&self, job: JobId) -> Vec<u32> {
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

    /// The job's slices (as [`Self::slices_of`]) by their place in the matrix.
    fn slice_rows_of(&self, job: JobId) -> Vec<u32> {
        let slices = self.sched.matrix().slices();
        self.slices_of(job)
            .iter()
            .filter_map(|&id| slices.iter().position(|s| s.id.0 == id))
            .map(|p| p as u32)
            .collect()
    }

    pub(super) fn home_slice(&self, job: JobId) -> Option<u32> {
        self.sched.matrix().placement(job).map(|p| p.home.0)
    }

    pub(super) fn job_view(&self, j: &Job, now: Now) -> JobView {
        self.job_view_waiting(j, now, self.pending_reason(j.id()))
    }

    /// [`Self::job_view`] with the pending reason found already (a listing finds every
    /// queued job's at once).
    fn job_view_waiting(&self, j: &Job, now: Now, pending_reason: String) -> JobView {
        let mut record = j.record.clone();
        record.run_ns = self.run_ns(j, now.wall_ns);
        // A running step holds its allocation's slices.
        let placed_as = if j.record.state().is_placed() {
            j.slot_job()
        } else {
            j.id()
        };
        JobView {
            record,
            slices: self.slices_of(placed_as),
            slice_rows: self.slice_rows_of(placed_as),
            ranks_done: j.ranks.iter().filter(|r| r.is_done()).count() as u32,
            deadlock: j.messaging.as_ref().and_then(|s| s.deadlock.clone()),
            pending_reason,
            array_tasks: match j.record.array {
                Some(a) if a.job == j.id() => self.array_size(a.job),
                _ => 0,
            },
            step_ids: self.jobs.steps_of(j.id()).to_vec(),
            array_indices: match j.record.array {
                Some(a) if a.job == j.id() => self.array_indices(a.job),
                _ => Vec::new(),
            },
        }
    }

    /// Why a queued job waits, in Slurm's terms: `waiting for node (X,Y): drained` (or
    /// `down`) when out-of-service nodes keep it out of even an empty slice, `priority`
    /// when another job is ahead of it, `resources` when it is next and nothing free fits
    /// it now. Empty for a job that is not queued. The scheduler decides; this only names
    /// the node's state.
    pub fn pending_reason(&self, id: JobId) -> String {
        if self.gated.contains(&id) {
            return self
                .jobs
                .get(id)
                .map(|j| self.gate_text(j, &mut Default::default()))
                .unwrap_or_default();
        }
        if let Some(j) = self.jobs.get(id)
            && j.record.allocation.is_some()
        {
            return if j.record.state() == State::Queued {
                self.step_pending_text(j)
            } else {
                String::new()
            };
        }
        self.sched
            .pending(id)
            .map(|p| self.pending_text(p))
            .unwrap_or_default()
    }

    fn pending_text(&self, p: Pending) -> String {
        match p {
            Pending::Priority(_) => "priority".into(),
            Pending::Resources => "resources".into(),
            Pending::Node { x, y } => {
                let down = self.node_index((x, y)).is_some_and(|i| !self.nodes[i].up);
                let why = if down { "down" } else { "drained" };
                format!("waiting for node ({x},{y}): {why}")
            }
        }
    }

    /// Whether `caller` may `action` (see, cancel, attach to...) `job`.
    pub(super) fn check_access(
        &self,
        caller: &Caller,
        job: &Job,
        action: &'static str,
    ) -> Result<()> {
        if caller.may_act_on(job.record.owner.uid) {
            return Ok(());
        }
        Err(MasterError::NotOwner {
            job: job.id(),
            owner: job.record.owner.user.clone(),
            caller: caller.owner.user.clone(),
            action,
        })
    }

    /// A job, for a caller who may see it.
    pub fn view_for(&self, caller: &Caller, id: JobId, now: Now) -> Result<JobView> {
        let j = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        self.check_access(caller, j, "see")?;
        Ok(self.job_view(j, now))
    }

    /// The jobs a caller may see (their own; an admin's: all), newest first: at most the
    /// filter's limit, and no more than its byte budget's worth (`Listed::more`: more may
    /// follow, below the last one's id).
    pub fn list_for(&self, caller: &Caller, filter: &ListFilter, now: Now) -> Listed {
        // Why queued jobs wait, found for the whole queue at once, and only if the page
        // has one (finding it runs the allocator over the queue).
        let pending: std::cell::OnceCell<std::collections::HashMap<JobId, Pending>> =
            std::cell::OnceCell::new();
        let limit = if filter.limit == 0 {
            DEFAULT_LIST_LIMIT
        } else {
            filter.limit
        };
        let mut limits_counted = std::collections::HashMap::new();
        // Only jobs not ended asked for (a watch's snapshot): the live ones, not a history.
        let live_only = !filter.states.is_empty() && filter.states.iter().all(|s| !s.is_final());
        let jobs: Box<dyn Iterator<Item = &Job>> = if live_only {
            Box::new(self.jobs.live_newest_before(filter.before))
        } else {
            Box::new(self.jobs.newest_before(filter.before))
        };
        let mut bytes = 0usize;
        let mut views = Vec::new();
        let mut more = false;
        for j in jobs
            .filter(|j| caller.may_act_on(j.record.owner.uid))
            .filter(|j| filter.states.is_empty() || filter.states.contains(&j.record.state()))
        {
            if views.len() >= limit || (filter.max_bytes > 0 && bytes >= filter.max_bytes) {
                more = true;
                break;
            }
            bytes += listed_bytes(j);
            let why = if self.gated.contains(&j.id()) {
                self.gate_text(j, &mut limits_counted)
            } else if j.record.allocation.is_some() && j.record.state() == State::Queued {
                self.step_pending_text(j)
            } else if j.record.state() == State::Queued {
                pending
                    .get_or_init(|| self.sched.pending_all().into_iter().collect())
                    .get(&j.id())
                    .map(|p| self.pending_text(*p))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            views.push(self.job_view_waiting(j, now, why));
        }
        Listed { views, more }
    }

    pub fn view(&self, id: JobId, now: Now) -> Result<JobView> {
        let j = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        Ok(self.job_view(j, now))
    }

    /// The job `uid` submitted with `token`, if any.
    pub fn job_by_token(&self, uid: u32, token: &str) -> Option<JobId> {
        self.jobs.by_token(uid, token)
    }

    /// Where rank 0 of a job runs, for its stdin.
    pub fn rank0(&self, id: JobId) -> Result<Rank0> {
        let job = self.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
        if job.record.state().is_final() {
            return Ok(Rank0::Ended);
        }
        if job.ranks.first() != Some(&Rank::Running) {
            return Ok(Rank0::NotYet);
        }
        let Some(node) = job.node_of(0) else {
            return Ok(Rank0::NotYet);
        };
        let addr = self
            .node_index(node)
            .and_then(|i| self.nodes[i].address.clone());
        Ok(addr.map_or(Rank0::NotYet, |a| Rank0::Running(node, a)))
    }

    pub(super) fn node_view(&self, i: usize) -> NodeView {
        let (x, y) = self.coord(i);
        let n = &self.nodes[i];
        let state = match (n.up, n.drained) {
            (false, _) => NodeState::Down,
            (true, true) => NodeState::Drained,
            (true, false) => NodeState::Up,
        };
        NodeView {
            node: (x, y),
            state,
            address: n.address.clone(),
            jobs: self
                .jobs
                .live()
                .filter(|j| j.rank_on(x, y).is_some())
                .map(Job::id)
                .collect(),
            clock_offset_ns: n.clock.offset_ns,
            clock_error_ns: n.clock.error_ns,
            clock_from_host: n.clock.from_host,
            last_heartbeat_ns: n.heartbeat_wall_ns,
            table_version: n.table_version,
            table_seq: self.slicer.seq_of(n.table_version).unwrap_or(0),
        }
    }

    pub fn nodes_view(&self) -> NodesView {
        NodesView {
            mesh: self.cfg.mesh,
            nodes: (0..self.nodes.len()).map(|i| self.node_view(i)).collect(),
        }
    }

    /// The slice table in force at `now`.
    pub fn table_in_force(&self, now: Now) -> Option<TableInForce> {
        let (effective_ns, t) = self.slicer.in_force(now.wall_ns)?;
        Some(TableInForce {
            version: t.version,
            seq: self.slicer.seq_of(t.version).unwrap_or(0),
            grid: t.grid,
            effective_ns,
            row_slices: t.rows.iter().map(|r| r.slice).collect(),
            parked: t.parked.iter().map(|(j, _)| *j).collect(),
        })
    }

    pub fn matrix_view(&self, now: Now) -> MatrixView {
        let m = self.sched.matrix();
        let table = self.table_in_force(now);
        let running_row = table
            .as_ref()
            .and_then(|t| t.grid.row_at(now.wall_ns, t.row_slices.len()))
            .map(|r| r as u32);
        MatrixView {
            mesh: self.cfg.mesh,
            mpl: self.cfg.mpl,
            slices: m
                .slices()
                .iter()
                .map(|s| SliceView {
                    id: s.id.0,
                    placements: s
                        .jobs()
                        .iter()
                        .filter_map(|&(job, role)| {
                            Some(PlacementView {
                                job,
                                submesh: m.placement(job)?.submesh,
                                home: role == Role::Home,
                            })
                        })
                        .collect(),
                })
                .collect(),
            queue: self.sched.queue().map(|q| q.id).collect(),
            table,
            now_ns: now.wall_ns,
            running_row,
        }
    }
}

/// A page of a listing.
#[derive(Debug)]
pub struct Listed {
    pub views: Vec<JobView>,
    /// It stopped at its limit or its byte budget: more jobs may follow.
    pub more: bool,
}

/// About what a job weighs in a listing's answer: its command line and the strings shown.
fn listed_bytes(j: &Job) -> usize {
    let r = &j.record;
    r.argv.iter().map(|a| a.len() + 2).sum::<usize>()
        + r.name.len()
        + r.cwd.len()
        + r.reason.len()
        + r.output_files.output.len()
        + r.output_files.error.len()
        + 512
}
