//! The agent's errors, and their one mapping to gRPC status codes.

use std::fmt;

use tonic::Status;

/// A node's mesh coordinate. Its `Display` form, `(x,y)`, prefixes every error the agent
/// returns, so a message read on the master (or by a user) says where it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coord {
    pub x: u32,
    pub y: u32,
}

impl fmt::Display for Coord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.x, self.y)
    }
}

/// Why a NodeAgent request failed. Each variant carries the node so that the text alone
/// is enough to act on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("node {node}: {what}")]
    InvalidArgument { node: Coord, what: String },
    #[error("node {node}: rank {rank} of job {job_id} is already here")]
    Duplicate { node: Coord, job_id: u64, rank: u32 },
    #[error(
        "node {node}: cannot run a rank as uid {wanted}: the agent runs as uid {agent} and is not root"
    )]
    Permission {
        node: Coord,
        wanted: u32,
        agent: u32,
    },
    #[error(
        "node {node}: will not run a rank as root (uid 0): this agent does not allow it (allow_root = false)"
    )]
    Root { node: Coord },
    #[error("node {node}: working directory {cwd:?}: {source}")]
    Cwd {
        node: Coord,
        cwd: String,
        source: std::io::Error,
    },
    #[error("node {node}: cannot start {program:?}: {source}")]
    Spawn {
        node: Coord,
        program: String,
        source: std::io::Error,
    },
    /// The spawn failed after the child took on the user's credentials: setting them,
    /// entering the working directory or executing the program as that user.
    #[error("node {node}: cannot start {program:?} as uid {uid} in {cwd:?}: {source}")]
    SpawnAs {
        node: Coord,
        program: String,
        uid: u32,
        cwd: String,
        source: std::io::Error,
    },
    /// The program uses an MPI that the job's `--mpi` or this agent's build cannot
    /// serve: refused rather than started as singletons.
    #[error("node {node}: cannot start {program:?}: {why}")]
    Mpi {
        node: Coord,
        program: String,
        why: String,
    },
    /// `prun --output/--error` names a file the rank cannot be given.
    #[error("node {node}: output file {}: {source}", path.display())]
    OutputFile {
        node: Coord,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("node {node}: no rank of job {job_id} here")]
    UnknownJob { node: Coord, job_id: u64 },
    #[error("node {node}: the agent is shutting down")]
    ShuttingDown { node: Coord },
}

impl From<AgentError> for Status {
    fn from(e: AgentError) -> Status {
        let msg = e.to_string();
        match e {
            AgentError::InvalidArgument { .. } => Status::invalid_argument(msg),
            AgentError::Duplicate { .. } => Status::already_exists(msg),
            AgentError::Permission { .. } | AgentError::Root { .. } => {
                Status::permission_denied(msg)
            }
            // The request was well formed but this node cannot honour it: the master fails
            // the job with this text.
            AgentError::Cwd { .. }
            | AgentError::Spawn { .. }
            | AgentError::SpawnAs { .. }
            | AgentError::Mpi { .. }
            | AgentError::OutputFile { .. } => Status::failed_precondition(msg),
            AgentError::UnknownJob { .. } => Status::not_found(msg),
            AgentError::ShuttingDown { .. } => Status::unavailable(msg),
        }
    }
}
