//! `gangctl certs` and `gangctl token`: the cluster's certificates, and tokens for remote
//! use.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gang_auth::PeerName;
use gang_auth::names::valid_user;
use gang_auth::pki::{Pki, TlsFiles};
use gang_proto::v1::IssueTokenRequest;

use crate::client_config;
use crate::connect::{self, CliError};

fn pki_error(e: gang_auth::pki::PkiError) -> CliError {
    CliError::other(e.to_string())
}

fn describe(who: &PeerName, f: &TlsFiles) -> String {
    format!("{who}: {} (key {})", f.cert.display(), f.key.display())
}

/// A new CA in `dir` with certificates for the master and every node of a `w`x`h` mesh.
pub fn init(dir: &Path, (w, h): (u32, u32), days: i64) -> Result<Vec<String>, CliError> {
    let pki = Pki::init(dir, w, h, days).map_err(pki_error)?;
    let mut out = vec![format!("cluster CA: {}", pki.ca().display())];
    out.push(describe(&PeerName::Master, &pki.files(&PeerName::Master)));
    out.push(format!(
        "{} node certificates in {} (node-X-Y.pem, node-X-Y-key.pem)",
        w * h,
        dir.join("nodes").display()
    ));
    out.push(format!(
        "keep {} away from the nodes: it signs every identity of the cluster",
        dir.join("ca-key.pem").display()
    ));
    Ok(out)
}

/// Another certificate from the CA in `dir`: a node's, or a user's.
pub fn issue(dir: &Path, who: &PeerName, days: i64) -> Result<String, CliError> {
    if let PeerName::User(u) = who
        && !valid_user(u)
    {
        return Err(CliError::other(format!("{u:?} is not a valid user name")));
    }
    let f = Pki::open(dir).issue(who, days).map_err(pki_error)?;
    Ok(describe(who, &f))
}

/// A token from the master at `master` (its Unix socket), printed or saved.
pub async fn token(master: &str, ttl_s: u64, save: bool) -> Result<String, CliError> {
    let mut client = connect::auth_client(master).await?;
    let t = client
        .issue_token(IssueTokenRequest { ttl_s })
        .await?
        .into_inner();
    if save {
        let path = client_config::default_token_file()
            .ok_or_else(|| CliError::other("HOME is not set: cannot save the token"))?;
        write_private(&path, &t.token)?;
        return Ok(format!(
            "token for {} (uid {}) saved to {}; valid until {}",
            t.user,
            t.uid,
            path.display(),
            crate::output::format::fmt_time_ns(t.expires_ns)
        ));
    }
    Ok(t.token)
}

fn write_private(path: &PathBuf, text: &str) -> Result<(), CliError> {
    let err = |e: std::io::Error| CliError::other(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}
