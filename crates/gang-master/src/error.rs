//! Domain errors of the master, and their one mapping to gRPC status codes.

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
    #[error("the master is shutting down")]
    ShuttingDown,
}

impl From<MasterError> for tonic::Status {
    fn from(e: MasterError) -> Self {
        use tonic::Status;
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
            MasterError::NotOwner { .. } => Status::permission_denied(msg),
            MasterError::ShuttingDown => Status::unavailable(msg),
            MasterError::Sched(_) | MasterError::Store(_) => Status::internal(msg),
        }
    }
}

pub type Result<T, E = MasterError> = std::result::Result<T, E>;
