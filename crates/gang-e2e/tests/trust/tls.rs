//! gRPC channels over the cluster's TLS, with whatever identity a test wants to present.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use gang_auth::pki::TlsFiles;
use gang_proto::client::{self, Credentials, MasterChannel, Target};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A channel to `addr`, verifying the server by `server_name` against the cluster CA,
/// presenting `who`'s certificate (None: none). Connected lazily: with TLS 1.3 a refused
/// client certificate shows at the first call anyway.
pub fn mtls(addr: SocketAddr, ca: &Path, who: Option<&TlsFiles>, server_name: &str) -> Channel {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(ca)))
        .domain_name(server_name);
    if let Some(f) = who {
        tls = tls.identity(Identity::from_pem(read(&f.cert), read(&f.key)));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("an address")
        .tls_config(tls)
        .expect("a TLS config")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_lazy()
}

/// A client of the master's TLS port as `prun` and `gangctl` make it (the proto crate's
/// connect), with a token or a certificate.
pub async fn remote(
    url: &str,
    ca: &Path,
    token: Option<&str>,
    cert: Option<&TlsFiles>,
) -> MasterChannel {
    let creds = Credentials {
        ca: Some(read(ca)),
        identity: cert.map(|f| (read(&f.cert), read(&f.key))),
        token: token.map(str::to_string),
    };
    let target = Target::parse(url).expect("a TLS address");
    client::connect(&target, &creds, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e:?}"))
}
