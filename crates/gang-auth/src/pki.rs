//! The cluster's certificates: one CA, and certificates it signs for the master, each node
//! and users. `gangctl certs init DIR --mesh WxH` writes a directory in this layout, which
//! an admin can also fill with PEM files of their own (same names, same subject
//! alternative names):
//!
//! ```text
//! DIR/ca.pem  DIR/ca-key.pem                      the cluster CA (keep ca-key.pem offline)
//! DIR/master.pem  DIR/master-key.pem              DNS master.gang, URI gang://master
//! DIR/nodes/node-X-Y.pem  node-X-Y-key.pem        DNS node-X-Y.gang, URI gang://node/X/Y
//! DIR/users/NAME.pem  NAME-key.pem                URI gang://user/NAME (client only)
//! ```
//!
//! Keys are ECDSA P-256, written with mode 0600; certificates carry both server and client
//! authentication usages (a node's certificate is the agent's server identity towards the
//! master and its client identity towards the master's agent port).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::names::PeerName;

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{0} already holds a cluster CA (ca.pem); remove it or use another directory")]
    Exists(PathBuf),
    #[error("no cluster CA in {0}: run `gangctl certs init {0} --mesh WxH` first")]
    NoCa(PathBuf),
}

type Result<T, E = PkiError> = std::result::Result<T, E>;

/// Where one party's TLS material is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA certificate, to verify peers by.
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The PEM texts of [`TlsFiles`].
#[derive(Debug, Clone)]
pub struct TlsPem {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl TlsFiles {
    pub fn read(&self) -> Result<TlsPem> {
        Ok(TlsPem {
            ca: read(&self.ca)?,
            cert: read(&self.cert)?,
            key: read(&self.key)?,
        })
    }
}

fn read(p: &Path) -> Result<String> {
    fs::read_to_string(p).map_err(|error| PkiError::Io {
        path: p.to_path_buf(),
        error,
    })
}

fn write(p: &Path, text: &str, mode: u32) -> Result<()> {
    let io = |error| PkiError::Io {
        path: p.to_path_buf(),
        error,
    };
    if let Some(dir) = p.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io)?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(p)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)
}

/// A directory of cluster certificates.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

/// Certificates are valid from an hour ago (clocks differ a little) for this long.
pub const DEFAULT_DAYS: i64 = 825;
const CA_DAYS: i64 = 3650;

impl Pki {
    pub fn open(dir: impl Into<PathBuf>) -> Pki {
        Pki { dir: dir.into() }
    }

    /// A new CA in `dir`, with certificates for the master and every node of a `w`x`h`
    /// mesh. Refuses a directory that already has a CA (so one is never overwritten).
    pub fn init(dir: impl Into<PathBuf>, w: u32, h: u32, days: i64) -> Result<Pki> {
        let pki = Pki::open(dir);
        if pki.ca().exists() {
            return Err(PkiError::Exists(pki.dir.clone()));
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn("gang cluster CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, CA_DAYS);
        let cert = params.self_signed(&key)?;
        write(&pki.ca_key(), &key.serialize_pem(), 0o600)?;
        write(&pki.ca(), &cert.pem(), 0o644)?;
        let issuer = Issuer::new(params, key);
        pki.issue_with(&issuer, &PeerName::Master, days)?;
        for y in 0..h {
            for x in 0..w {
                pki.issue_with(&issuer, &PeerName::Node { x, y }, days)?;
            }
        }
        Ok(pki)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn ca_key(&self) -> PathBuf {
        self.dir.join("ca-key.pem")
    }

    /// Where the certificate of `who` is (or goes).
    pub fn files(&self, who: &PeerName) -> TlsFiles {
        let (dir, stem) = match who {
            PeerName::Master => (self.dir.clone(), "master".to_string()),
            PeerName::Node { x, y } => (self.dir.join("nodes"), format!("node-{x}-{y}")),
            PeerName::User(u) => (self.dir.join("users"), u.clone()),
        };
        TlsFiles {
            ca: self.ca(),
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}-key.pem")),
        }
    }

    /// Sign a (new) certificate for `who` with this directory's CA.
    pub fn issue(&self, who: &PeerName, days: i64) -> Result<TlsFiles> {
        if !self.ca_key().exists() {
            return Err(PkiError::NoCa(self.dir.clone()));
        }
        let key = KeyPair::from_pem(&read(&self.ca_key())?)?;
        let issuer = Issuer::from_ca_cert_pem(&read(&self.ca())?, key)?;
        self.issue_with(&issuer, who, days)
    }

    fn issue_with(
        &self,
        issuer: &Issuer<'_, KeyPair>,
        who: &PeerName,
        days: i64,
    ) -> Result<TlsFiles> {
        let servers = match who {
            PeerName::User(_) => vec![],
            // A browser on the master's host opens the portal at https://localhost.
            PeerName::Master => vec![who.dns(), "localhost".to_string()],
            _ => vec![who.dns()],
        };
        let mut params = CertificateParams::new(servers)?;
        params.distinguished_name = dn(&who.to_string());
        params
            .subject_alt_names
            .push(SanType::URI(who.uri().try_into()?));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match who {
            PeerName::User(_) => vec![ExtendedKeyUsagePurpose::ClientAuth],
            _ => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        validity(&mut params, days);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, issuer)?;
        let files = self.files(who);
        write(&files.key, &key.serialize_pem(), 0o600)?;
        write(&files.cert, &cert.pem(), 0o644)?;
        Ok(files)
    }
}

fn dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "gang");
    dn.push(DnType::CommonName, common_name);
    dn
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::peer_name;

    fn der(pem_text: &str) -> Vec<u8> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes()).unwrap();
        pem.contents
    }

    #[test]
    fn a_cluster_directory_names_everyone_and_keeps_keys_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::init(dir.path().join("tls"), 2, 2, 30).unwrap();
        for who in [
            PeerName::Master,
            PeerName::Node { x: 0, y: 0 },
            PeerName::Node { x: 1, y: 1 },
        ] {
            let f = pki.files(&who);
            let pem = f.read().unwrap();
            assert_eq!(peer_name(&der(&pem.cert)), Some(who.clone()));
            let mode = fs::metadata(&f.key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{who}");
        }
        let alice = pki.issue(&PeerName::User("alice".into()), 1).unwrap();
        assert_eq!(
            peer_name(&der(&alice.read().unwrap().cert)),
            Some(PeerName::User("alice".into()))
        );
        let e = Pki::init(dir.path().join("tls"), 2, 2, 30).unwrap_err();
        assert!(e.to_string().contains("already holds a cluster CA"), "{e}");
        let e = Pki::open(dir.path().join("none"))
            .issue(&PeerName::Master, 1)
            .unwrap_err();
        assert!(e.to_string().contains("gangctl certs init"), "{e}");
    }
}
