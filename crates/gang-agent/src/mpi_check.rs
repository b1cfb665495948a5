//! `prun --mpi-check`: the agent preloads the PMPI checking library (`gang-mpi-check`)
//! into the rank, the build matching the job's MPI: Open MPI's for `--mpi pmix`, MPICH's
//! otherwise (pmi1, pmi2, none). The library writes the rank's state page in its
//! `GANG_MSG_DIR` as the messaging library does, so `MsgHub::activity` reports the rank
//! (it reads any page whose magic is written, with or without a control-socket hello)
//! and the master's deadlock check needs nothing new.
//!
//! The libraries are embedded in the agent binary and written once, mode 0644, to
//! `<msg base>/mpi-check/` (a directory of the agent's user, 0755, in a base only it
//! writes): no install step, and no path a job's user could swap a library into.
//! User-supplied `LD_PRELOAD` is dropped by `env_policy` unless the agent's `env_allow`
//! keeps it; then ours goes first (two PMPI tools do not stack: the first one wins).

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gang_mpi_check::Impl;

use crate::request::{Mpi, RankRequest};

/// The implementation whose build a job gets.
pub fn implementation(mpi: Mpi) -> Impl {
    match mpi {
        Mpi::Pmix => Impl::OpenMpi,
        Mpi::Pmi1 | Mpi::Pmi2 | Mpi::None => Impl::Mpich,
    }
}

/// Installed libraries, by base and implementation: written once per agent (again if
/// removed).
static INSTALLED: Mutex<Option<HashMap<(PathBuf, Impl), PathBuf>>> = Mutex::new(None);

/// The `LD_PRELOAD` to add to the rank's environment, None without `--mpi-check`; an
/// error naming what is missing when the library cannot be provided.
pub fn preload(
    msg_base: &Path,
    req: &RankRequest,
    env_allow: &BTreeSet<String>,
) -> Result<Option<(String, String)>, String> {
    if !req.mpi_check {
        return Ok(None);
    }
    let imp = implementation(req.mpi);
    let lib = installed(msg_base, imp).map_err(|e| {
        format!(
            "--mpi-check: cannot provide the {} checking library: {e}",
            imp.name()
        )
    })?;
    let mut value = lib.display().to_string();
    if env_allow.contains("LD_PRELOAD")
        && let Some(theirs) = req.env.get("LD_PRELOAD").filter(|v| !v.is_empty())
    {
        value = format!("{value}:{theirs}");
    }
    Ok(Some(("LD_PRELOAD".to_string(), value)))
}

fn installed(msg_base: &Path, imp: Impl) -> Result<PathBuf, String> {
    let mut cache = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    let key = (msg_base.to_path_buf(), imp);
    if let Some(p) = cache.get(&key)
        && p.is_file()
    {
        return Ok(p.clone());
    }
    own_base(msg_base)?;
    let path =
        gang_mpi_check::install(&msg_base.join("mpi-check"), imp).map_err(|e| e.to_string())?;
    cache.insert(key, path.clone());
    Ok(path)
}

/// The messaging base, made as `msg::pages` makes it (0711) if this is the first
/// launch, and checked to be the agent's own: whoever can rename entries in it could
/// swap the library every rank loads.
fn own_base(base: &Path) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(mpi: Mpi, check: bool) -> RankRequest {
        RankRequest {
            mpi,
            mpi_check: check,
            ..Default::default()
        }
    }

    #[test]
    fn the_job_s_mpi_chooses_the_build_and_no_check_adds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("msg");
        let none = BTreeSet::new();
        assert_eq!(preload(&base, &request(Mpi::Pmi1, false), &none), Ok(None));
        for (mpi, stem) in [
            (Mpi::Pmi1, "mpich"),
            (Mpi::Pmi2, "mpich"),
            (Mpi::None, "mpich"),
            (Mpi::Pmix, "openmpi"),
        ] {
            let (k, v) = preload(&base, &request(mpi, true), &none).unwrap().unwrap();
            assert_eq!(k, "LD_PRELOAD");
            let p = PathBuf::from(&v);
            assert!(p.starts_with(base.join("mpi-check")), "{v}");
            assert!(
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("libgang_mpi_check_{stem}-")),
                "{mpi:?}: {v}"
            );
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o644);
        }
        assert_eq!(std::fs::metadata(&base).unwrap().mode() & 0o777, 0o711);
    }

    #[test]
    fn an_allowed_user_preload_comes_after_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let mut req = request(Mpi::Pmi1, true);
        req.env.insert("LD_PRELOAD".into(), "/opt/tool.so".into());
        let (_, v) = preload(tmp.path(), &req, &BTreeSet::new())
            .unwrap()
            .unwrap();
        assert!(!v.contains("tool.so"), "{v}");
        let allow = BTreeSet::from(["LD_PRELOAD".to_string()]);
        let (_, v) = preload(tmp.path(), &req, &allow).unwrap().unwrap();
        assert!(v.ends_with(".so:/opt/tool.so"), "{v}");
    }

    #[test]
    fn a_base_others_may_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("shared");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = preload(&base, &request(Mpi::Pmix, true), &BTreeSet::new()).unwrap_err();
        assert!(
            err.contains("--mpi-check") && err.contains("writable by it alone"),
            "{err}"
        );
    }
}
