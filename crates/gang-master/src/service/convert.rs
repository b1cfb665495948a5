//! Protobuf at the edge: requests become domain commands, domain answers become replies,
//! and every error becomes a `Status` through the one map below.

use gang_core::job::deadlock::Activity;
use gang_core::{GangMode, JobId, SchedError};
use gang_proto::v1;
use tonic::Status;

use crate::error::MasterError;
use crate::job::State;
use crate::state::events::{
    Caller, ClockReport, ExitHow, FenceArrival, Heartbeat, ListFilter, NewJob, RankExit,
    Registered, Registration,
};
use crate::state::views::{JobView, MatrixView, NodeState, NodeView, NodesView};

pub use super::job_info::{LIST_PAGE_BYTES, LIST_PAGE_JOBS, job_info, launch_progress, list_page};

/// A cancel that states a uid must state the caller's.
pub fn check_stated_uid(uid: u32, caller: &Caller) -> Result<(), MasterError> {
    stated(
        "uid",
        uid != 0 && uid != caller.owner.uid,
        uid.to_string(),
        caller,
    )
}

/// The one mapping of the master's errors to gRPC status codes.
impl From<MasterError> for Status {
    fn from(e: MasterError) -> Self {
        let msg = e.to_string();
        match e {
            MasterError::Invalid(_) | MasterError::Shape(_) => Status::invalid_argument(msg),
            MasterError::Sched(SchedError::NeverFits { .. }) => Status::invalid_argument(msg),
            MasterError::Sched(SchedError::Duplicate(_)) => Status::already_exists(msg),
            MasterError::Sched(SchedError::UnknownJob(_)) | MasterError::UnknownJob(_) => {
                Status::not_found(msg)
            }
            MasterError::UnknownNode { .. } | MasterError::Sched(SchedError::NoSuchNode { .. }) => {
                Status::not_found(msg)
            }
            MasterError::NotOwner { .. }
            | MasterError::AdminOnly { .. }
            | MasterError::RootJobs
            | MasterError::Impersonation { .. } => Status::permission_denied(msg),
            MasterError::Unauthenticated(_) => Status::unauthenticated(msg),
            MasterError::Forbidden(_) => Status::permission_denied(msg),
            MasterError::TooLarge { .. } => Status::invalid_argument(msg),
            MasterError::QueueFull { .. }
            | MasterError::QueueBytes { .. }
            | MasterError::TooManyAttaches { .. } => Status::resource_exhausted(msg),
            MasterError::ShuttingDown
            | MasterError::Unavailable(_)
            | MasterError::NotSaved(_)
            | MasterError::FenceAhead { .. } => Status::unavailable(msg),
            MasterError::NotRunning { .. }
            | MasterError::AlreadyEnded { .. }
            | MasterError::NotQueued { .. } => Status::failed_precondition(msg),
            MasterError::Output { .. } | MasterError::Internal(_) => Status::internal(msg),
            MasterError::Sched(_) | MasterError::Store(_) => Status::internal(msg),
        }
    }
}

fn invalid(what: String) -> MasterError {
    MasterError::Invalid(what)
}

/// A gang mode from the wire: `None` for UNSPECIFIED (the cluster default).
/// `JobSpec.output`/`.error`, checked here so that a job never reaches an agent with a
/// pattern it cannot expand (empty means "relay the stream", not an empty file name).
fn output_files(output: &str, error: &str) -> Result<crate::job::OutputFiles, MasterError> {
    for (field, pattern) in [("output", output), ("error", error)] {
        if !pattern.is_empty() {
            gang_core::job::output_pattern::validate(pattern)
                .map_err(|e| invalid(format!("spec.{field}: {e}")))?;
        }
    }
    Ok(crate::job::OutputFiles {
        output: output.to_string(),
        error: error.to_string(),
    })
}

fn gang_mode(m: i32) -> Result<Option<GangMode>, MasterError> {
    v1::GangMode::try_from(m)
        .map(v1::GangMode::resolved)
        .map_err(|_| {
            invalid(format!(
                "unknown gang mode {m}: expected stop, priority, none or freeze"
            ))
        })
}

/// A request that states who it is must state the truth.
fn stated(
    field: &'static str,
    lie: bool,
    stated: String,
    caller: &Caller,
) -> Result<(), MasterError> {
    if lie {
        return Err(MasterError::Impersonation {
            field,
            stated,
            actual: format!(
                "{} (uid {}, gid {})",
                caller.owner.user, caller.owner.uid, caller.owner.gid
            ),
        });
    }
    Ok(())
}

/// The job a caller submits: theirs. A stated gid may pick another of the caller's groups
/// as the job's primary group (as `sg` does).
pub fn new_job(req: v1::SubmitRequest, caller: &Caller) -> Result<NewJob, MasterError> {
    check_stated_identity(&req, caller)?;
    let spec = req
        .spec
        .ok_or_else(|| invalid("the request has no job spec".into()))?;
    let client_token = client_token(&req.client_token)?;
    let mut owner = caller.owner.clone();
    if req.gid != 0 {
        owner.gid = req.gid;
    }
    Ok(NewJob {
        owner,
        gang: gang_mode(spec.gang)?,
        on_deadlock: v1::DeadlockPolicy::try_from(spec.on_deadlock)
            .map_err(|_| {
                invalid(format!(
                    "unknown deadlock policy {}: expected report or kill",
                    spec.on_deadlock
                ))
            })?
            .resolved(),
        msg_context: v1::MsgContext::try_from(spec.msg_context)
            .map_err(|_| {
                invalid(format!(
                    "unknown context mode {}: expected resident or save-restore",
                    spec.msg_context
                ))
            })?
            .resolved(),
        mpi: mpi_choice(spec.mpi)?,
        mpi_check: spec.mpi_check,
        output_files: output_files(&spec.output, &spec.error)?,
        at_submit: at_submit(spec.hold, &spec.array)?,
        dependency: gang_core::schedule::dependency::parse(&spec.dependency)
            .map_err(|e| invalid(format!("spec.dependency: {e}")))?,
        name: spec.name,
        script: (!spec.script.is_empty()).then_some(crate::job::BatchScript {
            text: spec.script,
            at: spec.script_at,
        }),
        argv: spec.argv,
        cwd: spec.cwd,
        env: spec.env.into_iter().collect(),
        time_limit_s: spec.time_limit_s,
        stdin: spec.stdin,
        shape: spec.shape,
        client_token,
        allocate: spec.allocate,
        allocation: (spec.allocation != 0).then_some(JobId(spec.allocation)),
        pty: crate::job::Pty::asked(spec.pty, &spec.output, &spec.error).map_err(invalid)?,
    })
}

/// A uid, gid or user the request states must be the caller's own (a gid: one of their
/// groups).
fn check_stated_identity(req: &v1::SubmitRequest, caller: &Caller) -> Result<(), MasterError> {
    let me = &caller.owner;
    stated(
        "uid",
        req.uid != 0 && req.uid != me.uid,
        req.uid.to_string(),
        caller,
    )?;
    stated(
        "gid",
        req.gid != 0 && !me.groups.contains(&req.gid) && req.gid != me.gid,
        req.gid.to_string(),
        caller,
    )?;
    stated(
        "user",
        !req.user.is_empty() && req.user != me.user,
        req.user.clone(),
        caller,
    )
}

/// The client's idempotency token: 1 to 128 printable ASCII characters, or none.
fn client_token(t: &str) -> Result<Option<String>, MasterError> {
    match t {
        "" => Ok(None),
        t if t.len() <= 128 && t.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(t.to_string())),
        t => {
            let why = if t.len() > 128 {
                format!("it is {} bytes long", t.len())
            } else {
                "it holds a character that is not printable ASCII".to_string()
            };
            Err(invalid(format!(
                "client_token must be 1 to 128 printable ASCII characters: {why}"
            )))
        }
    }
}

/// The MPI interface a job asks for (none: the cluster's default).
fn mpi_choice(mpi: i32) -> Result<Option<crate::job::Mpi>, MasterError> {
    Ok(match v1::Mpi::try_from(mpi) {
        Ok(v1::Mpi::Unspecified) => None,
        Ok(v1::Mpi::Pmi1) => Some(crate::job::Mpi::Pmi1),
        Ok(v1::Mpi::Pmi2) => Some(crate::job::Mpi::Pmi2),
        Ok(v1::Mpi::Pmix) => Some(crate::job::Mpi::Pmix),
        Ok(v1::Mpi::None) => Some(crate::job::Mpi::None),
        Ok(v1::Mpi::Auto) => Some(crate::job::Mpi::Auto),
        Err(_) => {
            return Err(invalid(format!(
                "unknown MPI interface {mpi}: expected auto, pmi1, pmi2, pmix or none"
            )));
        }
    })
}

/// What a submission asks that only matters at submission: a hold, an array's tasks.
fn at_submit(hold: bool, array: &str) -> Result<crate::job::AtSubmit, MasterError> {
    Ok(crate::job::AtSubmit {
        hold,
        // The task count's limit is the master's config: checked in the reactor.
        array: match array.trim() {
            "" => None,
            a => Some(
                gang_core::schedule::array::parse(
                    a,
                    gang_core::schedule::array::MAX_INDEX as usize + 1,
                )
                .map_err(|e| invalid(format!("spec.array: {e}")))?,
            ),
        },
    })
}

pub fn job_state(s: State) -> v1::JobState {
    match s {
        State::Queued => v1::JobState::Queued,
        State::Starting => v1::JobState::Starting,
        State::Running => v1::JobState::Running,
        State::Completed => v1::JobState::Completed,
        State::Failed => v1::JobState::Failed,
        State::Cancelled => v1::JobState::Cancelled,
        State::Timeout => v1::JobState::Timeout,
    }
}

fn state_of(s: v1::JobState) -> Option<State> {
    Some(match s {
        v1::JobState::Unspecified => return None,
        v1::JobState::Queued => State::Queued,
        v1::JobState::Starting => State::Starting,
        v1::JobState::Running => State::Running,
        v1::JobState::Completed => State::Completed,
        v1::JobState::Failed => State::Failed,
        v1::JobState::Cancelled => State::Cancelled,
        v1::JobState::Timeout => State::Timeout,
    })
}

pub fn list_filter(req: v1::ListJobsRequest) -> Result<ListFilter, MasterError> {
    let states = req
        .states
        .iter()
        .map(|&s| {
            v1::JobState::try_from(s)
                .ok()
                .and_then(state_of)
                .ok_or_else(|| invalid(format!("unknown job state {s} in the filter")))
        })
        .collect::<Result<_, _>>()?;
    Ok(ListFilter {
        states,
        // A page at a time: a round never builds more (clients ask for the next page).
        limit: match req.limit as usize {
            0 => LIST_PAGE_JOBS,
            n => n.min(LIST_PAGE_JOBS),
        },
        before: (req.before_id > 0).then_some(JobId(req.before_id)),
        max_bytes: LIST_PAGE_BYTES,
    })
}

/// The spec a job was submitted with, as a listing shows it (no environment, no script
/// text).
pub(super) fn job_spec(v: &JobView) -> v1::JobSpec {
    let gang = v1::GangMode::from(v.gang) as i32;
    // A task's own patterns (its array's, with its %A and %a).
    let files = match v.array {
        Some(a) => a.output_files(&v.output_files),
        None => v.output_files.clone(),
    };
    v1::JobSpec {
        shape: v.shape.clone(),
        argv: v.argv.clone(),
        cwd: v.cwd.clone(),
        env: Default::default(),
        time_limit_s: v.time_limit_s,
        stdin: v.stdin,
        name: v.name.clone(),
        gang,
        on_deadlock: v1::DeadlockPolicy::from(v.on_deadlock) as i32,
        msg_context: v1::MsgContext::from(v.msg_context) as i32,
        mpi: v1::Mpi::from(v.mpi) as i32,
        mpi_check: v.mpi_check,
        output: files.output,
        error: files.error,
        dependency: v
            .dependency
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        hold: false,
        array: String::new(),
        allocation: v.allocation.map_or(0, |a| a.0),
        allocate: v.allocate,
        // Its text stays with the job (listings would carry it for every job); where
        // its path goes tells that there is one.
        script: String::new(),
        script_at: v.script.as_ref().map_or(0, |s| s.at),
        pty: v1::Pty::from(v.pty) as i32,
    }
}

fn rank_refs(rs: &[v1::RankRef]) -> Vec<(JobId, u32)> {
    rs.iter().map(|r| (JobId(r.job_id), r.rank)).collect()
}

pub fn registration(r: v1::RegisterRequest) -> Registration {
    Registration {
        node: (r.x, r.y),
        running: rank_refs(&r.running),
        address: r.address,
    }
}

pub fn registered(r: Registered) -> v1::RegisterResponse {
    v1::RegisterResponse {
        mesh_w: r.mesh_w,
        mesh_h: r.mesh_h,
        heartbeat_ms: r.heartbeat_ms,
        kill_jobs: r.kill_jobs.into_iter().map(|j| j.0).collect(),
        node_timeout_ms: r.node_timeout_ms,
        idle_heartbeat_ms: r.idle_heartbeat_ms,
        idle_node_timeout_ms: r.idle_node_timeout_ms,
        clock_probe_max_ms: r.clock_probe_max_ms,
        agent_lease_ms: r.agent_lease_ms,
        // Set by the service (`Registry::relay_key`): not state.
        relay_key: Vec::new(),
    }
}

pub fn heartbeat(r: v1::HeartbeatRequest) -> Heartbeat {
    Heartbeat {
        node: (r.x, r.y),
        running: rank_refs(&r.running),
        clock: ClockReport {
            offset_ns: r.clock_offset_ns,
            error_ns: r.clock_error_ns,
            from_host: r.clock_from_host,
        },
        table_version: r.table_version,
        activity: r
            .activity
            .iter()
            .map(|a| {
                (
                    JobId(a.job_id),
                    Activity {
                        rank: a.rank,
                        blocked_since_ns: a.blocked_since_ns,
                        source: a.source,
                        tag: a.tag,
                        posted: a.posted,
                        delivered: a.delivered,
                    },
                )
            })
            .collect(),
    }
}

pub fn fence_arrival(r: v1::FenceRequest) -> FenceArrival {
    FenceArrival {
        node: (r.x, r.y),
        job: JobId(r.job_id),
        rank: r.rank,
        epoch: r.epoch,
        puts: r.puts.into_iter().collect(),
    }
}

/// An exit report; `lost` is what of the rank's streams the output log lacks.
pub fn rank_exit(r: v1::RankExit, lost: Vec<(crate::job::OutStream, u64)>) -> RankExit {
    use v1::rank_exit::How;
    RankExit {
        job: JobId(r.job_id),
        rank: r.rank,
        node: (r.x, r.y),
        abort: r.abort,
        lost,
        usage: crate::job::RankUsage {
            cpu_user_ns: r.cpu_user_ns,
            cpu_system_ns: r.cpu_system_ns,
            mem_peak_bytes: r.mem_peak_bytes,
        },
        how: match r.how {
            Some(How::Code(c)) => ExitHow::Code(c),
            Some(How::Signal(s)) => ExitHow::Signal(s),
            Some(How::Error(e)) => ExitHow::Error(e),
            None => ExitHow::Unknown,
        },
    }
}

pub fn node_info(n: &NodeView) -> v1::NodeInfo {
    let state = match n.state {
        NodeState::Up => v1::NodeState::Up,
        NodeState::Down => v1::NodeState::Down,
        NodeState::Drained => v1::NodeState::Drained,
    };
    v1::NodeInfo {
        x: n.node.0,
        y: n.node.1,
        state: state as i32,
        address: n.address.clone().unwrap_or_default(),
        jobs: n.jobs.iter().map(|j| j.0).collect(),
        clock_offset_ns: n.clock_offset_ns,
        clock_error_ns: n.clock_error_ns,
        last_heartbeat_ns: n.last_heartbeat_ns,
        clock_from_host: n.clock_from_host,
        table_version: n.table_version,
        table_seq: n.table_seq,
    }
}

pub fn nodes(v: &NodesView) -> v1::ListNodesResponse {
    v1::ListNodesResponse {
        mesh_w: v.mesh.w,
        mesh_h: v.mesh.h,
        nodes: v.nodes.iter().map(node_info).collect(),
    }
}

pub fn matrix(m: &MatrixView) -> v1::Matrix {
    let t = m.table.as_ref();
    v1::Matrix {
        mesh_w: m.mesh.w,
        mesh_h: m.mesh.h,
        mpl: m.mpl,
        slices: m
            .slices
            .iter()
            .map(|s| v1::SliceInfo {
                id: s.id,
                placements: s
                    .placements
                    .iter()
                    .map(|p| v1::Placement {
                        job_id: p.job.0,
                        submesh: Some(p.submesh.into()),
                        home: p.home,
                    })
                    .collect(),
            })
            .collect(),
        queue: m.queue.iter().map(|j| j.0).collect(),
        table_version: t.map_or(0, |t| t.version),
        table_seq: t.map_or(0, |t| t.seq),
        epoch_ns: t.map_or(0, |t| t.grid.epoch_ns),
        quantum_ns: t.map_or(0, |t| t.grid.quantum_ns),
        effective_ns: t.map_or(0, |t| t.effective_ns),
        row_slices: t.map_or(vec![], |t| t.row_slices.clone()),
        now_ns: m.now_ns,
        running_row: m.running_row,
        parked: t.map_or(vec![], |t| t.parked.iter().map(|j| j.0).collect()),
    }
}
