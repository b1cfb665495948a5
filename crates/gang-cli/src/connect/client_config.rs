//! The client config file: where the master is and, for a remote master, what to prove
//! ourselves with. Precedence: `--master`, then `GANG_MASTER`, then the file, then the
//! address a running `gangctl start` left in its per-user file (`local_master`), then the
//! default (the master's Unix socket, `unix:/run/gang/master.sock`). The file is the first
//! that exists of `$GANG_CONFIG`, `$XDG_CONFIG_HOME/gang/client.toml` (or
//! `~/.config/gang/client.toml`) and `/etc/gang/client.toml`:
//!
//! ```toml
//! master = "https://master.example:7470"   # or "unix:/run/gang/master.sock"
//! ca = "/etc/gang/tls/ca.pem"              # the cluster CA (TLS addresses)
//! token_file = "~/.config/gang/token"      # from `gangctl token --save`; or:
//! cert = "~/.config/gang/alice.pem"        # a user certificate and its key
//! key = "~/.config/gang/alice-key.pem"
//! ```
//!
//! Environment variables override the file: `GANG_CA`, `GANG_CERT`, `GANG_KEY` (paths),
//! `GANG_TOKEN` (the token itself).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use gang_proto::client::Credentials;

use crate::error::{CliError, DEFAULT_MASTER};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub master: Option<String>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
}

/// The config files looked at, in order.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(p) = std::env::var_os("GANG_CONFIG") {
        out.push(PathBuf::from(p));
        return out;
    }
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        out.push(PathBuf::from(x).join("gang/client.toml"));
    } else if let Some(h) = std::env::var_os("HOME") {
        out.push(PathBuf::from(h).join(".config/gang/client.toml"));
    }
    out.push(PathBuf::from("/etc/gang/client.toml"));
    out
}

pub fn load(path: &Path) -> Result<ClientConfig, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::other(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| CliError::other(format!("config {}: {e}", path.display())))
}

/// The config file in use, if any. `$GANG_CONFIG` naming a missing file is an error; the
/// other places are optional.
pub fn active() -> Result<ClientConfig, CliError> {
    let explicit = std::env::var_os("GANG_CONFIG").is_some();
    for path in candidates() {
        if path.exists() || explicit {
            return load(&path);
        }
    }
    Ok(ClientConfig::default())
}

/// The master address: the flag or env value if given, else the config file's, else the
/// local cluster a running `gangctl start` recorded ([`gang_local::driver::local_master`]), else the
/// default.
///
/// A local cluster taken this way is named on stderr (once): which of the user's
/// clusters "the newest" is changes as they start and stop them.
pub fn master(flag_or_env: Option<String>) -> Result<String, CliError> {
    if let Some(m) = flag_or_env {
        return Ok(m);
    }
    if let Some(m) = active()?.master {
        return Ok(m);
    }
    Ok(match gang_local::driver::local_master::newest() {
        Some((record, running)) => {
            note_local(&record, running);
            record.addr
        }
        None => DEFAULT_MASTER.to_string(),
    })
}

/// `prun: using the local cluster in DIR (gangctl start, pid N, WxH)`, and how many run
/// if more than one. On stderr, so that stdout (and `--output json`'s) stays the answer.
fn note_local(record: &gang_local::driver::local_master::Record, running: usize) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("{}", local_note(&program(), record, running)));
}

fn local_note(prog: &str, r: &gang_local::driver::local_master::Record, running: usize) -> String {
    let place = match &r.dir {
        Some(dir) => format!("in {}", dir.display()),
        None => format!("at {}", r.addr),
    };
    let mesh = r
        .mesh
        .map(|(w, h)| format!(", {w}x{h}"))
        .unwrap_or_default();
    let mut note = format!(
        "{prog}: using the local cluster {place} (gangctl start, pid {}{mesh})",
        r.pid
    );
    if running > 1 {
        note.push_str(&format!(
            "; {running} are running: choose with --master or GANG_MASTER"
        ));
    }
    note
}

/// The command's name (`prun`, `gangctl`), for messages said before any command ran.
fn program() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "gang".into())
}

/// `~/x` -> `$HOME/x`.
fn expand(p: &Path) -> PathBuf {
    match (p.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => p.to_path_buf(),
    }
}

fn read(what: &str, p: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(expand(p))
        .map_err(|e| CliError::other(format!("cannot read the {what} {}: {e}", p.display())))
}

/// Where `gangctl token --save` keeps a token (and where it is looked for by default).
pub fn default_token_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/gang/token"))
}

/// What to prove ourselves with to a TLS master: env, then the config file; the system CA
/// path and the saved token are used when they exist.
pub fn credentials() -> Result<Credentials, CliError> {
    let cfg = active()?;
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let ca_path = env("GANG_CA").or(cfg.ca).or_else(|| {
        let p = PathBuf::from("/etc/gang/tls/ca.pem");
        p.exists().then_some(p)
    });
    let ca = ca_path.map(|p| read("cluster CA", &p)).transpose()?;
    let identity = match (env("GANG_CERT").or(cfg.cert), env("GANG_KEY").or(cfg.key)) {
        (Some(c), Some(k)) => Some((read("certificate", &c)?, read("key", &k)?)),
        (None, None) => None,
        _ => {
            return Err(CliError::other(
                "a user certificate needs both cert and key (GANG_CERT, GANG_KEY)",
            ));
        }
    };
    let token = match std::env::var("GANG_TOKEN").ok().filter(|t| !t.is_empty()) {
        Some(t) => Some(t),
        None => match cfg.token_file {
            Some(p) => Some(read("token file", &p)?),
            None => default_token_file()
                .filter(|p| p.exists())
                .map(|p| read("token file", &p))
                .transpose()?,
        },
    };
    Ok(Credentials {
        ca,
        identity,
        token: token.map(|t| t.trim().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_cluster_taken_is_named_with_how_many_run() {
        use gang_local::driver::local_master::Record;
        let r = Record {
            addr: "unix:/tmp/gang-cluster-x/master.sock".into(),
            pid: 123,
            started_ns: 1,
            dir: Some("/tmp/gang-cluster-x".into()),
            mesh: Some((4, 4)),
        };
        assert_eq!(
            local_note("prun", &r, 1),
            "prun: using the local cluster in /tmp/gang-cluster-x (gangctl start, pid 123, 4x4)"
        );
        assert_eq!(
            local_note("gangctl", &r, 2),
            "gangctl: using the local cluster in /tmp/gang-cluster-x (gangctl start, pid 123, \
             4x4); 2 are running: choose with --master or GANG_MASTER"
        );
        let old = Record {
            dir: None,
            mesh: None,
            ..r
        };
        assert_eq!(
            local_note("prun", &old, 1),
            "prun: using the local cluster at unix:/tmp/gang-cluster-x/master.sock (gangctl \
             start, pid 123)"
        );
    }

    #[test]
    fn parses_and_refuses_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("client.toml");
        std::fs::write(&p, "master = \"10.0.0.1:7470\"\n").unwrap();
        assert_eq!(load(&p).unwrap().master.as_deref(), Some("10.0.0.1:7470"));
        std::fs::write(&p, "mastr = \"x\"\n").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("client.toml") && e.contains("mastr"), "{e}");
    }
}
