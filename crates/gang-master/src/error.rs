//! Domain errors of the master. Their one mapping to gRPC status codes is in
//! `service/convert.rs`.

use gang_core::{JobId, SchedError, ShapeError};

#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Shape(#[from] ShapeError),
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error("node ({x},{y}) is not on the {w}x{h} mesh")]
    UnknownNode { x: u32, y: u32, w: u32, h: u32 },
    #[error("job {job} belongs to {owner}: {caller} may not {action} it")]
    NotOwner {
        job: JobId,
        owner: String,
        caller: String,
        action: &'static str,
    },
    #[error(
        "{caller} may not {action}: admins only (`admins` and `admin_groups` in the master's config)"
    )]
    AdminOnly {
        caller: String,
        action: &'static str,
    },
    #[error("jobs may not run as root on this cluster (allow_root_jobs is off)")]
    RootJobs,
    #[error(
        "the request says {field} {stated} but the caller is {actual}; identity comes from the connection"
    )]
    Impersonation {
        field: &'static str,
        stated: String,
        actual: String,
    },
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{what} is {size} bytes; the limit is {limit} ({key} in the master's config)")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
        key: &'static str,
    },
    #[error("{user} already has {queued} jobs queued; the limit is {limit} (max_queued_per_user)")]
    QueueFull {
        user: String,
        queued: usize,
        limit: usize,
    },
    #[error(
        "{user}'s queued jobs already hold {held} bytes of commands, environments and names; \
         this adds {adds}; the limit is {limit} (max_queued_bytes_per_user)"
    )]
    QueueBytes {
        user: String,
        held: u64,
        adds: u64,
        limit: u64,
    },
    #[error(
        "{user} already has {open} attach streams open (prun, gangctl output); the limit is \
         {limit} (connections.max_attaches_per_user)"
    )]
    TooManyAttaches {
        user: String,
        open: usize,
        limit: usize,
    },
    #[error(transparent)]
    Sched(#[from] SchedError),
    #[error("state database: {0}")]
    /// The store refused (SQLite's error, as text: the pure state knows no database).
    Store(String),
    /// The round holding the request could not be committed; nothing of it was applied.
    #[error("state not saved: {0}")]
    NotSaved(String),
    #[error("output log of job {job}: {source}")]
    Output { job: u64, source: std::io::Error },
    /// The master itself failed (no system randomness for a token id).
    #[error("{0}")]
    Internal(String),
    #[error("the master is shutting down")]
    ShuttingDown,
    /// Not now: too many of something; asking again later may work.
    #[error("{0}")]
    Unavailable(String),
    /// A user's cancel of a job that has ended: Slurm's scancel says "already completing
    /// or completed"; a script must learn the cancel did nothing.
    #[error("job {job} already {state}")]
    AlreadyEnded { job: JobId, state: &'static str },
    #[error("job {job} is {state}: only a queued job can be {action}")]
    NotQueued {
        job: JobId,
        state: &'static str,
        action: &'static str,
    },
    #[error("job {job} is not running (it is {state})")]
    NotRunning { job: JobId, state: &'static str },
    /// A rank's fence is ahead of its job's (retries after a master restart): ask again.
    #[error("job {job}: fence {epoch} is ahead of the job's fence {current}; ask again")]
    FenceAhead {
        job: JobId,
        epoch: u32,
        current: u32,
    },
}

pub type Result<T, E = MasterError> = std::result::Result<T, E>;
