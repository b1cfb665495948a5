//! `gangctl certs`: the cluster's certificates.

use std::path::Path;

use gang_auth::PeerName;
use gang_auth::names::valid_user;
use gang_auth::pki::{Pki, TlsFiles};

use crate::connect::CliError;

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
