//! Reaching the master as a client. Two kinds of address:
//!
//! - `unix:/run/gang/master.sock` (or a plain absolute path): the master's Unix socket on
//!   a cluster host; the master knows the caller from the socket's peer credentials.
//! - `https://HOST:PORT` (or `HOST:PORT`): its TLS client port, verified against the
//!   cluster CA by the name `master.gang`; the caller presents a user certificate or a
//!   token (`authorization: Bearer`).
//!
//! Plain `http://` is refused: the master serves no unencrypted TCP.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The name the master's certificate carries (see `gang-auth`).
pub const MASTER_DNS: &str = "master.gang";

/// Where the master is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    /// `https://host:port`.
    Tls(String),
}

impl Target {
    pub fn parse(addr: &str) -> Result<Target, String> {
        let addr = addr.trim();
        if let Some(p) = addr.strip_prefix("unix:") {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        if addr.starts_with('/') {
            return Ok(Target::Unix(PathBuf::from(addr)));
        }
        if addr.starts_with("http://") {
            return Err(format!(
                "{addr}: the master serves no plain HTTP; use https://HOST:PORT with the \
                 cluster CA, or unix:/run/gang/master.sock on a cluster host"
            ));
        }
        let hostport = addr.strip_prefix("https://").unwrap_or(addr);
        if hostport.is_empty() || hostport.contains("://") {
            return Err(format!("{addr:?} is not a master address"));
        }
        Ok(Target::Tls(format!("https://{hostport}")))
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tls(u) => f.write_str(u),
        }
    }
}

/// What a client proves itself with over TLS (nothing is needed on the Unix socket).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The cluster CA (PEM), to verify the master by.
    pub ca: Option<String>,
    /// A user certificate and key (PEM).
    pub identity: Option<(String, String)>,
    /// A token from `gangctl token`.
    pub token: Option<String>,
}

/// Adds the token, if any, to every call.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A channel to the master with the caller's token on every call.
pub type MasterChannel = InterceptedService<Channel, Bearer>;

/// Metadata of a standby master's refusals (state in etcd, another master leads): where
/// the leader is, as its leader key says (`clients=ADDR agents=ADDR host=H pid=P`). A
/// client or agent given several masters takes it as "try the next".
pub const LEADER_METADATA: &str = "gang-leader";

/// Why a connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// The address or the credentials are wrong: retrying will not help.
    Config(String),
    /// The master could not be reached.
    Unreachable(String),
}

/// An endpoint with the keep-alives and timeouts clients use.
fn tuned(e: Endpoint, connect_timeout: Duration, request_timeout: Option<Duration>) -> Endpoint {
    let e = match request_timeout {
        Some(t) => e.timeout(t),
        None => e,
    };
    e.connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true)
}

/// An error and its causes on one line, a cause left out when the text before already
/// holds it (tonic and hyper repeat theirs). The one printer of error chains: the CLI and
/// `gang-local` use it too.
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

/// Connect now (so an unreachable master is reported here, not at the first call).
pub async fn connect(
    target: &Target,
    creds: &Credentials,
    connect_timeout: Duration,
) -> Result<MasterChannel, ConnectError> {
    connect_with_request_timeout(target, creds, connect_timeout, None).await
}

/// [`connect`], and every call on the channel fails with `CANCELLED: Timeout expired`
/// when the master has not answered within `request_timeout`. It bounds the wait for the
/// response's head only: a stream (Attach, Watch) that opened is never cut off, so it
/// serves as a first-answer timeout there.
pub async fn connect_with_request_timeout(
    target: &Target,
    creds: &Credentials,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
) -> Result<MasterChannel, ConnectError> {
    let bearer = match &creds.token {
        Some(t) => Bearer(Some(format!("Bearer {}", t.trim()).parse().map_err(
            |_| ConnectError::Config("the token is not printable ASCII".into()),
        )?)),
        None => Bearer(None),
    };
    let channel = match target {
        Target::Unix(path) => {
            let path = path.clone();
            // The URI is not used: the connector below always dials the socket.
            tuned(
                Endpoint::from_static("http://master.sock"),
                connect_timeout,
                request_timeout,
            )
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(&path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(s))
                }
            }))
            .await
            .map_err(|e| ConnectError::Unreachable(error_chain(&e)))?
        }
        Target::Tls(uri) => {
            let Some(ca) = &creds.ca else {
                return Err(ConnectError::Config(
                    "a TLS address needs the cluster CA certificate (`ca` in the client \
                     config, or GANG_CA)"
                        .into(),
                ));
            };
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(MASTER_DNS);
            if let Some((cert, key)) = &creds.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            let e = Endpoint::from_shared(uri.clone())
                .and_then(|e| e.tls_config(tls))
                .map_err(|e| ConnectError::Config(format!("{uri}: {}", error_chain(&e))))?;
            tuned(e, connect_timeout, request_timeout)
                .connect()
                .await
                .map_err(|e| ConnectError::Unreachable(error_chain(&e)))?
        }
    };
    Ok(InterceptedService::new(channel, bearer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            Target::parse("unix:/run/gang/master.sock"),
            Ok(Target::Unix("/run/gang/master.sock".into()))
        );
        assert_eq!(
            Target::parse("/tmp/m.sock"),
            Ok(Target::Unix("/tmp/m.sock".into()))
        );
        assert_eq!(
            Target::parse("10.0.0.1:7470"),
            Ok(Target::Tls("https://10.0.0.1:7470".into()))
        );
        assert_eq!(
            Target::parse(" https://h:1 "),
            Ok(Target::Tls("https://h:1".into()))
        );
        assert!(
            Target::parse("http://h:1")
                .unwrap_err()
                .contains("no plain HTTP")
        );
        assert!(Target::parse("").is_err());
        assert_eq!(Target::parse("h:1").unwrap().to_string(), "https://h:1");
    }
}
