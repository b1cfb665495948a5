//! The messaging base, where the agent installs the libraries ranks preload
//! (`mpi::check`, `pmi::progress_preload`): it must be the agent's own, since whoever can
//! rename entries in it could swap a library every rank loads.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The messaging base, made as `msg::pages` makes it (0711) if this is the first
/// launch, and checked to be the agent's own: whoever can rename entries in it could
/// swap the library every rank loads.
pub fn own_base(base: &Path) -> Result<(), String> {
    if !base.is_dir() {
        std::fs::create_dir_all(base)
            .and_then(|()| std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711)))
            .map_err(|e| format!("{}: {e}", base.display()))?;
    }
    let meta = std::fs::symlink_metadata(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: not a directory of uid {me} writable by it alone (uid {}, mode {:o})",
            base.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}
