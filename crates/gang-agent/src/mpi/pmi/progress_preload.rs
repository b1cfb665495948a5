//! The PMI progress library (`preload/pmi_progress.c`, built into the agent by `build.rs`),
//! preloaded into every rank served the simple PMI protocol: once the rank's MPI library
//! closes its UCX endpoints (MPICH 4.0's `MPI_Finalize`), a read of the PMI socket
//! progresses the rank's UCX workers while it waits. Without it a rank waiting in
//! finalize's PMI barrier never answers a peer's flush, and that peer waits forever: the
//! C file says how, and docs/internals/agent.md ("Fences") what showed it.
//!
//! Written once, mode 0644, to `<msg base>/preload/` (a directory of the agent's user in a
//! base only it writes, as `mpi::check`'s libraries): no path a job's user could swap it
//! through. Inert in a process that closes no UCX endpoint or has no `PMI_FD`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libgang_pmi_progress.so"));

/// Installed progress libraries, by messaging base: written once per agent (again if removed).
static INSTALLED: Mutex<Option<HashMap<PathBuf, PathBuf>>> = Mutex::new(None);

/// The library's path under `msg_base`, written there if it is not yet.
pub fn installed(msg_base: &Path) -> Result<PathBuf, String> {
    let mut cache = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(p) = cache.get(msg_base)
        && p.is_file()
    {
        return Ok(p.clone());
    }
    crate::mpi::trusted_dir::own_base(msg_base)?;
    let path =
        gang_mpi_check::install_library(&msg_base.join("preload"), "gang_pmi_progress", LIBRARY)
            .map_err(|e| e.to_string())?;
    cache.insert(msg_base.to_path_buf(), path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn the_library_is_a_shared_object_installed_once_for_every_user_to_read() {
        assert_eq!(&LIBRARY[..4], b"\x7fELF");
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("msg");
        let a = installed(&base).unwrap();
        let b = installed(&base).unwrap();
        assert_eq!(a, b);
        assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read(&a).unwrap(), LIBRARY);
    }
}
