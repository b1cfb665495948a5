//! The client config file: where the master is, for people who do not want to set
//! `GANG_MASTER` in every shell. Precedence: `--master`, then `GANG_MASTER`, then the file,
//! then the default. The file is the first that exists of `$GANG_CONFIG`,
//! `$XDG_CONFIG_HOME/gang/client.toml` (or `~/.config/gang/client.toml`) and
//! `/etc/gang/client.toml`:
//!
//! ```toml
//! master = "http://master.example:7470"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::connect::{CliError, DEFAULT_MASTER};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub master: Option<String>,
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

/// The master address: the flag or env value if given, else the config file's, else the
/// default. `$GANG_CONFIG` naming a missing file is an error; the other places are optional.
pub fn master(flag_or_env: Option<String>) -> Result<String, CliError> {
    if let Some(m) = flag_or_env {
        return Ok(m);
    }
    let explicit = std::env::var_os("GANG_CONFIG").is_some();
    for path in candidates() {
        if path.exists() || explicit {
            if let Some(m) = load(&path)?.master {
                return Ok(m);
            }
            break;
        }
    }
    Ok(DEFAULT_MASTER.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
