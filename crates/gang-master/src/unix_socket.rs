//! The master's Unix socket: bound by the leader's servers and by a standby's
//! (`standby.rs`), never over a live master's.

use std::path::Path;

use anyhow::Context;

/// Bind the Unix socket, replacing a stale one but never a live master's.
pub fn bind_socket(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("socket directory {}", dir.display()))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("another master is serving on {}", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("stale socket {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    // Anyone on the host may connect: the peer credentials say who they are.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}
