//! Mutual TLS with the master, both ways: the agent's NodeAgent server and its channel to
//! the master's agent port use the node's certificate, and trust only the cluster CA.
//!
//! - Server: a client certificate signed by the CA is required (the handshake fails
//!   without one), and every call is refused (PERMISSION_DENIED) unless that certificate
//!   names the master (`gang://master`): another node's certificate, or a user's, gets
//!   in no further than the interceptor.
//! - Client: the master is verified by the DNS name `master.gang`
//!   (`gang_auth::names::MASTER_DNS`), whatever address it is reached at.
//!
//! The agent's own certificate is checked at startup, before anything is served: it must
//! name this node (`gang://node/X/Y`), carry the DNS name the master verifies it by
//! (`node-X-Y.gang`) and be valid now. A wrong file is a configuration error better
//! reported at once than as an endless stream of refused registrations.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gang_auth::PeerName;
use gang_auth::names::{MASTER_DNS, node_dns};
use gang_auth::peer::peer_name;
use gang_auth::pki::{PkiError, TlsFiles};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Request, Status};
use tracing::warn;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

use crate::error::Coord;

/// A TLS handshake that has not finished by then is dropped (a connection that never
/// speaks must not hold a task forever; the listener's vetting bounds how many may wait,
/// silent ones evicted first). Not 10 s: a 10,000-node emulated fleet's first launch opens
/// thousands of connections between agents at once, and on its loaded host handshakes
/// took longer: each was dropped and started again, its work lost, until hops ran out.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Warn at startup when the certificate expires sooner than this.
const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS file {0}")]
    Read(#[from] PkiError),
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: not a readable X.509 certificate: {message}")]
    Parse { path: PathBuf, message: String },
    #[error(
        "{path}: the certificate names no gang identity (no URI gang://node/X/Y): is it one made by `gangctl certs init`?"
    )]
    NoIdentity { path: PathBuf },
    #[error(
        "{path} is the certificate of {named}, not of node {node}: give this agent node {node}'s certificate ({file}), or correct --x/--y"
    )]
    WrongNode {
        path: PathBuf,
        named: PeerName,
        node: Coord,
        file: String,
    },
    #[error(
        "{path}: the certificate of node {node} has no DNS name {dns}, by which the master verifies this agent"
    )]
    NoDnsName {
        path: PathBuf,
        node: Coord,
        dns: String,
    },
    #[error("{path}: the certificate is not valid now (valid from {from} to {until})")]
    NotValidNow {
        path: PathBuf,
        from: String,
        until: String,
    },
}

/// The agent's TLS material, checked.
pub struct NodeTls {
    ca: Certificate,
    identity: Identity,
    /// Where it came from, for messages.
    pub files: TlsFiles,
}

/// The key stays out of logs.
impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// Read the files and check that the certificate is node `node`'s, usable now.
    pub fn load(files: &TlsFiles, node: Coord) -> Result<NodeTls, TlsError> {
        let pem = files.read()?;
        check_certificate(&files.cert, pem.cert.as_bytes(), node)?;
        Ok(NodeTls {
            ca: Certificate::from_pem(pem.ca),
            identity: Identity::from_pem(pem.cert, pem.key),
            files: files.clone(),
        })
    }

    /// The NodeAgent server's: this node's identity; a CA-signed client certificate
    /// required.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
            .timeout(HANDSHAKE_TIMEOUT)
    }

    /// What the order tree needs to reach other agents (`tree::orders::OrderTree`).
    pub fn peer_tls(&self) -> crate::peers::PeerTls {
        crate::peers::PeerTls {
            ca: self.ca.clone(),
            identity: self.identity.clone(),
        }
    }

    /// The channel to the master's agent port: this node's identity; the master verified
    /// by its name, against the cluster CA only (no system roots).
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
            .domain_name(MASTER_DNS)
    }
}

/// The checks of [`NodeTls::load`] on the certificate's PEM text.
pub fn check_certificate(path: &Path, pem: &[u8], node: Coord) -> Result<(), TlsError> {
    let (_, block) = parse_x509_pem(pem).map_err(|_| TlsError::NoCertificate {
        path: path.to_owned(),
    })?;
    let cert = block.parse_x509().map_err(|e| TlsError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let me = PeerName::Node {
        x: node.x,
        y: node.y,
    };
    match peer_name(&block.contents) {
        Some(named) if named == me => {}
        Some(named) => {
            return Err(TlsError::WrongNode {
                path: path.to_owned(),
                named,
                node,
                file: format!("DIR/nodes/node-{}-{}.pem", node.x, node.y),
            });
        }
        None => {
            return Err(TlsError::NoIdentity {
                path: path.to_owned(),
            });
        }
    }
    let dns = node_dns(node.x, node.y);
    let has_dns = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|san| {
            san.value
                .general_names
                .iter()
                .any(|g| matches!(g, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(&dns)))
        });
    if !has_dns {
        return Err(TlsError::NoDnsName {
            path: path.to_owned(),
            node,
            dns,
        });
    }
    let validity = cert.validity();
    if !validity.is_valid() {
        return Err(TlsError::NotValidNow {
            path: path.to_owned(),
            from: validity.not_before.to_string(),
            until: validity.not_after.to_string(),
        });
    }
    if let Some(left) = validity.time_to_expiration()
        && left < EXPIRY_WARNING
    {
        warn!(
            cert = %path.display(),
            expires = %validity.not_after,
            "this node's certificate expires in {} days: issue a new one",
            left.whole_days()
        );
    }
    Ok(())
}

/// The NodeAgent interceptor: only the master may call an agent. The handshake already
/// proved the caller holds a CA-signed certificate; this checks whose it is.
pub fn only_the_master(node: Coord, request: &Request<()>) -> Result<(), Status> {
    admit(
        node,
        request,
        |p| matches!(p, PeerName::Master),
        ("NodeAgent", "only the master may call an agent"),
    )
}

/// The NodeRelay interceptor: the master or another node (an order from the tree is taken only
/// with the master's signature, checked by `tree::orders`); never a user.
pub fn only_the_cluster(node: Coord, request: &Request<()>) -> Result<(), Status> {
    admit(
        node,
        request,
        |p| matches!(p, PeerName::Master | PeerName::Node { .. }),
        ("NodeRelay", "only the master and other nodes may relay"),
    )
}

/// Let the call through if the caller's (leaf) certificate names someone `allowed`; else
/// PERMISSION_DENIED naming the rule and who was refused.
fn admit(
    node: Coord,
    request: &Request<()>,
    allowed: impl Fn(&PeerName) -> bool,
    (service, rule): (&str, &str),
) -> Result<(), Status> {
    let named = request
        .peer_certs()
        .and_then(|chain| chain.first().map(|leaf| peer_name(leaf.as_ref())));
    let who = match named {
        Some(Some(p)) if allowed(&p) => return Ok(()),
        Some(Some(other)) => format!("the caller's certificate names {other}"),
        Some(None) => "the caller's certificate names no gang identity".to_owned(),
        // Only reachable if the server were ever run without client authentication.
        None => "the caller presented no certificate".to_owned(),
    };
    let message = format!("node {node}: {rule}; {who}");
    warn!(peer = ?request.remote_addr(), "refused a {service} call: {message}");
    Err(Status::permission_denied(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_auth::pki::Pki;

    #[test]
    fn the_certificate_must_be_this_nodes_and_carry_its_dns_name() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::init(dir.path(), 2, 1, 30).unwrap();
        let node = |x, y| PeerName::Node { x, y };
        let files = pki.files(&node(1, 0));
        let tls = NodeTls::load(&files, Coord { x: 1, y: 0 }).unwrap();
        assert_eq!(tls.files, files);
        assert!(!format!("{tls:?}").contains("PRIVATE KEY"));

        let e = NodeTls::load(&files, Coord { x: 0, y: 0 }).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("is the certificate of node (1,0), not of node (0,0)")
                && text.contains("DIR/nodes/node-0-0.pem"),
            "{text}"
        );
        let master = pki.files(&PeerName::Master);
        let e = check_certificate(
            &master.cert,
            &std::fs::read(&master.cert).unwrap(),
            Coord { x: 0, y: 0 },
        )
        .unwrap_err();
        assert!(e.to_string().contains("certificate of the master"), "{e}");
        // A user certificate has the right shape of name but no DNS name.
        let alice = pki.issue(&PeerName::User("alice".into()), 1).unwrap();
        let e = check_certificate(
            &alice.cert,
            &std::fs::read(&alice.cert).unwrap(),
            Coord { x: 0, y: 0 },
        )
        .unwrap_err();
        assert!(e.to_string().contains("user alice"), "{e}");
        let e = check_certificate(Path::new("k.pem"), b"not pem", Coord { x: 0, y: 0 });
        assert!(
            e.unwrap_err().to_string().contains("no PEM certificate"),
            "not PEM"
        );
        // Issued for 0 days: its validity ended as it was made.
        let stale = Pki::init(dir.path().join("stale"), 1, 1, 0).unwrap();
        let e = NodeTls::load(&stale.files(&node(0, 0)), Coord { x: 0, y: 0 }).unwrap_err();
        assert!(e.to_string().contains("is not valid now"), "{e}");
        let missing = TlsFiles {
            ca: dir.path().join("nope.pem"),
            ..files
        };
        let e = NodeTls::load(&missing, Coord { x: 1, y: 0 }).unwrap_err();
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }
}
