//! Reaching the master: address normalization, channels and clients, and what a client
//! proves: the client config file, tokens and certificates.
//!
//! - [`client_config`]: the master address and credentials from the client config file.
//! - [`tokens`]: `gangctl token` (get one on the socket, save it) and `token revoke`.
//! - [`certs`]: `gangctl certs`, the cluster's certificates.

pub mod certs;
pub mod client_config;
pub mod tokens;

use std::time::Duration;

use gang_proto::client::{self, ConnectError, Credentials, MasterChannel, Target};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::auth_service_client::AuthServiceClient;
use gang_proto::v1::job_service_client::JobServiceClient;

/// How long a connection attempt may take before the master counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// With several masters listed, how long one may take to connect and say whether it
/// leads before the next is tried.
pub const ONE_OF_SEVERAL: Duration = Duration::from_secs(3);

pub use crate::error::{CliError, DEFAULT_MASTER, status_is_transient};

/// The one printer of error chains, gang-local's.
pub use gang_local::error_chain;

/// Connect to the master at `addr`, eagerly, so that an unreachable master is reported
/// here. A TLS address brings the credentials of the client config (`credentials`).
///
/// `addr` may list several masters, comma-separated (`unix:/a.sock,https://b:7470`): of
/// masters sharing their state in etcd only the leader serves (a standby refuses, naming
/// the leader), so the first that answers and does not stand by is the one; if none,
/// the last one's error is reported.
pub async fn channel(addr: &str) -> Result<MasterChannel, CliError> {
    let mut last = None;
    let several = addr.contains(',');
    for one in addr.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if several {
            // One of several that does not answer soon (a standby under a flood, a host
            // gone) is passed over for the next, not waited on.
            let tried = tokio::time::timeout(ONE_OF_SEVERAL, async {
                let c = channel_to(one).await?;
                Ok::<_, CliError>((stands_by(&c).await, c))
            })
            .await;
            match tried {
                Ok(Ok((None, c))) => return Ok(c),
                Ok(Ok((Some(why), _))) => {
                    last = Some(CliError::Unreachable {
                        addr: one.to_string(),
                        detail: why,
                    })
                }
                Ok(Err(e @ (CliError::Unreachable { .. } | CliError::NoAnswer { .. }))) => {
                    last = Some(e)
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    last = Some(CliError::NoAnswer {
                        addr: one.to_string(),
                        after: ONE_OF_SEVERAL,
                    })
                }
            }
            continue;
        }
        match channel_to(one).await {
            Ok(c) => return Ok(c),
            Err(e @ (CliError::Unreachable { .. } | CliError::NoAnswer { .. })) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| CliError::Other(format!("no master address in {addr:?}"))))
}

/// Whether the master behind `ch` stands by (it refuses calls, naming the leader): what it
/// says if so. One health check; a leader, or a master of before standbys answered,
/// passes.
async fn stands_by(ch: &MasterChannel) -> Option<String> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let mut health = HealthClient::new(ch.clone());
    let check = health.check(HealthCheckRequest {
        service: String::new(),
    });
    match check.await {
        Err(s)
            if s.metadata()
                .contains_key(gang_proto::client::LEADER_METADATA) =>
        {
            Some(s.message().to_string())
        }
        // A master that closed the connection (its pool full) or broke it does not serve
        // us: the next one may.
        Err(s) if crate::timeouts::is_timeout(&s) || transport_failure(&s) => {
            Some(format!("it did not answer: {}", s.message()))
        }
        _ => None,
    }
}

/// A call that failed in transport (the connection closed or reset), not by the master.
fn transport_failure(s: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(s.code(), Code::Unknown | Code::Cancelled)
        || (s.code() == Code::Unavailable && !s.message().starts_with("state not saved"))
}

async fn channel_to(addr: &str) -> Result<MasterChannel, CliError> {
    let target = Target::parse(addr).map_err(CliError::Other)?;
    let creds = match target {
        Target::Unix(_) => Credentials::default(),
        Target::Tls(_) => client_config::credentials()?,
    };
    let addr = target.to_string();
    crate::timeouts::note_master(&addr);
    let limit = crate::timeouts::limit();
    let connect = client::connect_with_request_timeout(
        &target,
        &creds,
        limit.map_or(CONNECT_TIMEOUT, |l| l.min(CONNECT_TIMEOUT)),
        limit,
    );
    // Over the whole of it (TCP, TLS, HTTP/2): a listener that accepts and stays silent
    // stalls the handshakes, which the transport's connect timeout does not all cover.
    let connected = match limit {
        Some(after) => {
            tokio::time::timeout(after, connect)
                .await
                .map_err(|_| CliError::NoAnswer {
                    addr: addr.clone(),
                    after,
                })?
        }
        None => connect.await,
    };
    connected.map_err(|e| match e {
        ConnectError::Config(m) => CliError::Other(m),
        ConnectError::Unreachable(detail) => CliError::Unreachable {
            addr: target.to_string(),
            detail,
        },
    })
}

pub async fn job_client(addr: &str) -> Result<JobServiceClient<MasterChannel>, CliError> {
    Ok(JobServiceClient::new(channel(addr).await?))
}

pub async fn admin_client(addr: &str) -> Result<AdminServiceClient<MasterChannel>, CliError> {
    Ok(AdminServiceClient::new(channel(addr).await?))
}

/// A fresh idempotency token for `SubmitRequest.client_token` (128 random bits, hex).
pub fn new_client_token() -> Result<String, CliError> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| CliError::other(format!("cannot read /dev/urandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// How long a submission is retried while the master cannot be reached (it restarts).
pub const SUBMIT_RETRY_FOR: Duration = Duration::from_secs(30);

/// Submit, retrying when the connection breaks during the call and while the master is
/// then unreachable (it restarts); with the request's token, a retry never makes a second
/// job. A master unreachable from the start is reported at once (a wrong address should
/// not take 30 s to say so; with several masters listed, it is retried as a failover),
/// and an answer, even a refusal, ends it: "state not saved"
/// says the master is up and cannot write, which waiting will not change.
pub async fn submit_with_retries(
    addr: &str,
    req: gang_proto::v1::SubmitRequest,
) -> Result<gang_proto::v1::SubmitResponse, CliError> {
    let deadline = tokio::time::Instant::now() + SUBMIT_RETRY_FOR;
    let mut pause = Duration::from_millis(100);
    // Several masters (sharing their state in etcd): none answering may be an election
    // under way, not a wrong address.
    let mut reached = addr.contains(',');
    loop {
        let attempt = async {
            let mut client = job_client(addr).await?;
            reached = true;
            Ok::<_, CliError>(client.submit(req.clone()).await?.into_inner())
        };
        match attempt.await {
            Ok(job) => return Ok(job),
            Err(e)
                if reached
                    && retry_submit(&e)
                    && tokio::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

fn retry_submit(e: &CliError) -> bool {
    match e {
        CliError::Unreachable { .. } => true,
        CliError::Rpc(s) => {
            use tonic::Code;
            // Transport failures surface as these; the master's own refusals do not.
            matches!(s.code(), Code::Unknown | Code::Cancelled)
                || (s.code() == Code::Unavailable && !s.message().starts_with("state not saved"))
        }
        // Silence for the whole timeout: saying so beats waiting that long again.
        CliError::NoAnswer { .. } | CliError::Other(_) => false,
    }
}

pub async fn auth_client(addr: &str) -> Result<AuthServiceClient<MasterChannel>, CliError> {
    Ok(AuthServiceClient::new(channel(addr).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let e = CliError::Rpc(tonic::Status::not_found("unknown job 99"));
        assert_eq!(e.to_string(), "unknown job 99");
        assert!(!e.is_transient());
        let e = CliError::Unreachable {
            addr: "http://127.0.0.1:1".into(),
            detail: "refused".into(),
        };
        assert!(
            e.to_string()
                .starts_with("cannot reach the master at http://127.0.0.1:1: refused ("),
            "{e}"
        );
        // Says what to do, not only what failed.
        assert!(e.to_string().contains("`gangctl start`"), "{e}");
        assert!(e.to_string().contains("GANG_MASTER"), "{e}");
        assert!(e.is_transient());
    }

    #[tokio::test]
    async fn unreachable_master() {
        let e = channel("unix:/nonexistent/master.sock").await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach the master at unix:/nonexistent/master.sock: "),
            "{e}"
        );
        let e = channel("http://127.0.0.1:1").await.unwrap_err();
        assert!(e.to_string().contains("no plain HTTP"), "{e}");
    }
}
