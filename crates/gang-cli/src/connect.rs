//! Reaching the master: address normalization, channels, clients, and the error type that
//! `prun` and `gangctl` print as `PROG: MESSAGE`.

use std::fmt;
use std::time::Duration;

use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::job_service_client::JobServiceClient;
use tonic::transport::{Channel, Endpoint};

/// The master's default address (also the `GANG_MASTER` fallback).
pub const DEFAULT_MASTER: &str = "http://127.0.0.1:7470";

/// How long a connection attempt may take before the master counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An error of a user command. Its `Display` is the message after `PROG: `.
#[derive(Debug)]
pub enum CliError {
    /// No connection to the master could be made.
    Unreachable { addr: String, detail: String },
    /// The master answered with an error; its message names the problem.
    Rpc(tonic::Status),
    /// Anything else (local I/O, bad input found late, ...).
    Other(String),
}

impl CliError {
    pub fn other(msg: impl Into<String>) -> Self {
        CliError::Other(msg.into())
    }

    /// Whether retrying later could help (the master is down or restarting, or a stream
    /// broke), as opposed to an answer from a working master.
    pub fn is_transient(&self) -> bool {
        match self {
            CliError::Unreachable { .. } => true,
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

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Unreachable { addr, detail } => {
                write!(f, "cannot reach the master at {addr}: {detail}")
            }
            CliError::Rpc(s) if s.message().is_empty() => write!(f, "{}", s.code().description()),
            CliError::Rpc(s) => write!(f, "{}", s.message()),
            CliError::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for CliError {}

impl From<tonic::Status> for CliError {
    fn from(s: tonic::Status) -> Self {
        CliError::Rpc(s)
    }
}

/// `host:port` -> `http://host:port`; addresses with a scheme are kept.
pub fn normalize_addr(addr: &str) -> String {
    let addr = addr.trim();
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// An error and its sources, joined by ": " (tonic's transport errors say little alone).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        src = s.source();
    }
    out
}

/// Connect to the master at `addr` (already normalized or not), eagerly, so that an
/// unreachable master is reported here.
pub async fn channel(addr: &str) -> Result<Channel, CliError> {
    let addr = normalize_addr(addr);
    let endpoint = Endpoint::from_shared(addr.clone())
        .map_err(|e| {
            CliError::Other(format!(
                "invalid master address {addr:?}: {}",
                error_chain(&e)
            ))
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    endpoint.connect().await.map_err(|e| CliError::Unreachable {
        addr,
        detail: error_chain(&e),
    })
}

pub async fn job_client(addr: &str) -> Result<JobServiceClient<Channel>, CliError> {
    Ok(JobServiceClient::new(channel(addr).await?))
}

pub async fn admin_client(addr: &str) -> Result<AdminServiceClient<Channel>, CliError> {
    Ok(AdminServiceClient::new(channel(addr).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_a_scheme() {
        assert_eq!(normalize_addr("127.0.0.1:7470"), "http://127.0.0.1:7470");
        assert_eq!(normalize_addr("http://h:1"), "http://h:1");
        assert_eq!(normalize_addr(" https://h:1 "), "https://h:1");
    }

    #[test]
    fn messages() {
        let e = CliError::Rpc(tonic::Status::not_found("unknown job 99"));
        assert_eq!(e.to_string(), "unknown job 99");
        assert!(!e.is_transient());
        let e = CliError::Unreachable {
            addr: "http://127.0.0.1:1".into(),
            detail: "refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot reach the master at http://127.0.0.1:1: refused"
        );
        assert!(e.is_transient());
    }

    #[tokio::test]
    async fn unreachable_master() {
        let e = channel("127.0.0.1:1").await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach the master at http://127.0.0.1:1: "),
            "{e}"
        );
    }
}
