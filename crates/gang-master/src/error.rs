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
    #[error("job {job} belongs to uid {owner}; uid {caller} may not {action} it")]
    NotOwner {
        job: JobId,
        owner: u32,
        caller: u32,
        action: &'static str,
    },
    #[error(transparent)]
    Sched(#[from] SchedError),
    #[error("state database: {0}")]
    Store(#[from] rusqlite::Error),
    /// The batch holding the request could not be committed; nothing of it was applied.
    #[error("state not saved: {0}")]
    NotSaved(String),
    #[error("output log of job {job}: {source}")]
    Output { job: u64, source: std::io::Error },
    #[error("the master is shutting down")]
    ShuttingDown,
}

pub type Result<T, E = MasterError> = std::result::Result<T, E>;
