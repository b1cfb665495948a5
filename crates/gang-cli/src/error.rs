//! The error type that `prun` and `gangctl` print as `PROG: MESSAGE`, and the master's
//! default address: what every part of the CLI shares, importing nothing of it but the
//! timeout in force (to name it when the master does not answer).

use std::fmt;

/// The master's default address: its Unix socket on a cluster host.
pub const DEFAULT_MASTER: &str = "unix:/run/gang/master.sock";

/// An error of a user command. Its `Display` is the message after `PROG: `.
#[derive(Debug)]
pub enum CliError {
    /// No connection to the master could be made.
    Unreachable { addr: String, detail: String },
    /// The master answered with an error; its message names the problem.
    Rpc(tonic::Status),
    /// The master took a connection (or a request) and did not answer in time.
    NoAnswer {
        addr: String,
        after: std::time::Duration,
    },
    /// Anything else (local I/O, bad input found late, ...).
    Other(String),
}

impl CliError {
    pub fn other(msg: impl Into<String>) -> Self {
        CliError::Other(msg.into())
    }

    /// The error's code under `--output json`: the gRPC status name for the master's
    /// answers (`NOT_FOUND`, `FAILED_PRECONDITION`, ...), `UNAVAILABLE` when no connection
    /// could be made (as gRPC says for the same), `DEADLINE_EXCEEDED` when the master did
    /// not answer in time, `LOCAL` for anything found here.
    pub fn code(&self) -> &'static str {
        match self {
            CliError::Unreachable { .. } => "UNAVAILABLE",
            CliError::NoAnswer { .. } => "DEADLINE_EXCEEDED",
            CliError::Rpc(s) => code_name(s.code()),
            CliError::Other(_) => "LOCAL",
        }
    }

    /// Whether retrying later could help (the master is down or restarting, or a stream
    /// broke), as opposed to an answer from a working master.
    pub fn is_transient(&self) -> bool {
        match self {
            // A master restarting may be slow to answer at first; callers that retry bound
            // it (prun reattaches for 30 s), and a first contact never retries.
            CliError::Unreachable { .. } | CliError::NoAnswer { .. } => true,
            CliError::Rpc(s) => status_is_transient(s),
            CliError::Other(_) => false,
        }
    }
}

/// Status codes that mean "the connection or the master broke", not "the master said no".
pub fn status_is_transient(s: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        s.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::Aborted
            | Code::DeadlineExceeded
    )
}

/// gRPC's canonical name of a status code, as grpcurl, grpcio and the gRPC docs print it.
pub fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code;
    match c {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Unreachable { addr, detail } => {
                write!(
                    f,
                    "cannot reach the master at {addr}: {detail} (is it running? `gangctl start` \
                     starts a cluster on this machine; GANG_MASTER or --master names another)"
                )
            }
            CliError::NoAnswer { addr, after } => write!(
                f,
                "the master at {addr} did not answer within {} (--timeout, GANG_TIMEOUT)",
                crate::timeouts::show(*after)
            ),
            CliError::Rpc(s) if s.message().is_empty() => write!(f, "{}", s.code().description()),
            CliError::Rpc(s) => write!(f, "{}", s.message()),
            CliError::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for CliError {}

impl From<tonic::Status> for CliError {
    fn from(s: tonic::Status) -> Self {
        match crate::timeouts::limit() {
            Some(after) if crate::timeouts::is_timeout(&s) => CliError::NoAnswer {
                addr: crate::timeouts::master(),
                after,
            },
            _ => CliError::Rpc(s),
        }
    }
}
