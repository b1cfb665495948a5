//! Where `gang-master` and `gang-agent` are found.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

/// The master's binary.
pub const MASTER_BIN: &str = "gang-master";
/// The agent's binary.
pub const AGENT_BIN: &str = "gang-agent";

/// The directory the binaries are looked up in by default: the current executable's, or
/// its parent for test executables in `target/*/deps/`.
pub fn default_bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the current executable")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("the current executable {} has no directory", exe.display()))?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps")
        && !dir.join(MASTER_BIN).exists()
        && let Some(parent) = dir.parent()
    {
        return Ok(parent.to_path_buf());
    }
    Ok(dir)
}

pub(crate) fn find_bin(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if path.is_file() {
        return Ok(path);
    }
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "this program".into());
    bail!(
        "{name} not found next to {me} in {}; build the workspace: cargo build --release",
        dir.display()
    )
}
