//! `gangctl token`: tokens for remote use, and `gangctl token revoke`.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use gang_proto::v1::{IssueTokenRequest, RevokeTokensRequest, revoke_tokens_request::What};

use crate::connect::client_config;
use crate::connect::{self, CliError};
use crate::output::format::fmt_time_ns;

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
            "token {} for {} (uid {}) saved to {}; valid until {}",
            t.id,
            t.user,
            t.uid,
            path.display(),
            fmt_time_ns(t.expires_ns)
        ));
    }
    Ok(t.token)
}

/// What `gangctl token revoke` revokes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoke {
    /// A token, or `-`: the token on stdin (so it shows in no process list).
    Token(String),
    Id(String),
    User(String),
}

/// Revoke tokens at the master at `master` (its socket, or its TLS port): a line saying
/// what was revoked.
pub async fn revoke(master: &str, what: Revoke) -> Result<String, CliError> {
    let what = match what {
        Revoke::Token(t) if t == "-" => {
            let mut t = String::new();
            std::io::stdin()
                .read_to_string(&mut t)
                .map_err(|e| CliError::other(format!("cannot read the token from stdin: {e}")))?;
            What::Token(t.trim().to_string())
        }
        Revoke::Token(t) => What::Token(t.trim().to_string()),
        Revoke::Id(id) => What::Id(id),
        Revoke::User(u) => What::User(u),
    };
    if matches!(&what, What::Token(t) if t.is_empty()) {
        return Err(CliError::other(
            "no token to revoke: the token given is empty",
        ));
    }
    let mut client = connect::auth_client(master).await?;
    let r = client
        .revoke_tokens(RevokeTokensRequest { what: Some(what) })
        .await?
        .into_inner();
    Ok(match (r.id.is_empty(), r.user.is_empty()) {
        (false, false) => format!("revoked token {} of {}", r.id, r.user),
        (false, true) => format!("revoked token {}", r.id),
        _ => format!(
            "revoked every token of {} issued until {}",
            r.user,
            fmt_time_ns(r.issued_until_ns)
        ),
    })
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
