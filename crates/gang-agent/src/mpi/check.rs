//! `prun --mpi-check`: the agent preloads the PMPI checking library (`gang-mpi-check`)
//! into the rank, the build matching the job's MPI: Open MPI's for `--mpi pmix`, and under
//! `auto` for a program linked with Open MPI; MPICH's otherwise. The library writes the rank's state page in its
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
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gang_mpi_check::Impl;

use crate::mpi::program::ProgramMpi;
use crate::request::Mpi;

/// The implementation whose build a rank gets. Under `auto` the program says; a script
/// or launcher, which may run either, gets MPICH's, as every choice but `pmix` did
/// before `auto`: the wrong build stops the rank naming the `--mpi` to use, so the
/// guess costs a message, never a wrong answer.
pub fn implementation(mpi: Mpi, program: &ProgramMpi) -> Impl {
    match (mpi, program) {
        (Mpi::Pmix, _) | (Mpi::Auto, ProgramMpi::OpenMpi(_)) => Impl::OpenMpi,
        (Mpi::Auto | Mpi::Pmi1 | Mpi::Pmi2 | Mpi::None, _) => Impl::Mpich,
    }
}

/// Installed libraries, by base and implementation: written once per agent (again if
/// removed).
static INSTALLED: Mutex<Option<HashMap<(PathBuf, Impl), PathBuf>>> = Mutex::new(None);

/// The `LD_PRELOAD` to add to the rank's environment: the `check` build (None: without
/// `--mpi-check`), then, for a rank served the simple PMI protocol (`pmi`), the PMI
/// progress library (`pmi::progress_preload`), then the job's own where `env_allow` keeps that.
/// An error naming what is missing when the checking library cannot be provided; a progress
/// library that cannot be is left out, with a warning.
pub fn preload(
    msg_base: &Path,
    check: Option<Impl>,
    pmi: bool,
    job_env: &HashMap<String, String>,
    env_allow: &BTreeSet<String>,
) -> Result<Option<(String, String)>, String> {
    let mut libs = vec![];
    if let Some(imp) = check {
        let lib = installed(msg_base, imp).map_err(|e| {
            format!(
                "--mpi-check: cannot provide the {} checking library: {e}",
                imp.name()
            )
        })?;
        libs.push(lib.display().to_string());
    }
    if pmi {
        match crate::mpi::pmi::progress_preload::installed(msg_base) {
            Ok(lib) => libs.push(lib.display().to_string()),
            Err(e) => tracing::warn!("the rank runs without the PMI progress library: {e}"),
        }
    }
    if libs.is_empty() {
        return Ok(None);
    }
    let mut value = libs.join(":");
    if env_allow.contains("LD_PRELOAD")
        && let Some(theirs) = job_env.get("LD_PRELOAD").filter(|v| !v.is_empty())
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
    crate::mpi::trusted_dir::own_base(msg_base)?;
    let path =
        gang_mpi_check::install(&msg_base.join("mpi-check"), imp).map_err(|e| e.to_string())?;
    cache.insert(key, path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;
    use crate::mpi::program::Unseen;

    #[test]
    fn the_choice_and_under_auto_the_program_choose_the_build() {
        let open_mpi = ProgramMpi::OpenMpi("libmpi.so.40".into());
        let mpich = ProgramMpi::Mpich("libmpich.so.12".into());
        let script = ProgramMpi::Unseen(Unseen::Script);
        for program in [&open_mpi, &mpich, &script, &ProgramMpi::NoMpi] {
            assert_eq!(implementation(Mpi::Pmix, program), Impl::OpenMpi);
            for mpi in [Mpi::Pmi1, Mpi::Pmi2, Mpi::None] {
                assert_eq!(implementation(mpi, program), Impl::Mpich);
            }
        }
        assert_eq!(implementation(Mpi::Auto, &open_mpi), Impl::OpenMpi);
        for program in [&mpich, &script, &ProgramMpi::NoMpi] {
            assert_eq!(implementation(Mpi::Auto, program), Impl::Mpich);
        }
    }

    #[test]
    fn each_build_is_installed_and_no_check_adds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("msg");
        let (none, env) = (BTreeSet::new(), HashMap::new());
        assert_eq!(preload(&base, None, false, &env, &none), Ok(None));
        for (imp, stem) in [(Impl::Mpich, "mpich"), (Impl::OpenMpi, "openmpi")] {
            let (k, v) = preload(&base, Some(imp), false, &env, &none)
                .unwrap()
                .unwrap();
            assert_eq!(k, "LD_PRELOAD");
            let p = PathBuf::from(&v);
            assert!(p.starts_with(base.join("mpi-check")), "{v}");
            assert!(
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("libgang_mpi_check_{stem}-")),
                "{imp:?}: {v}"
            );
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o644);
        }
        assert_eq!(std::fs::metadata(&base).unwrap().mode() & 0o777, 0o711);
        // A rank served PMI gets the progress library, after the checking library.
        let (_, v) = preload(&base, None, true, &env, &none).unwrap().unwrap();
        assert!(v.contains("/preload/libgang_pmi_progress-"), "{v}");
        let (_, v) = preload(&base, Some(Impl::Mpich), true, &env, &none)
            .unwrap()
            .unwrap();
        let libs: Vec<&str> = v.split(':').collect();
        assert!(libs.len() == 2 && libs[1].contains("pmi_progress"), "{v}");
    }

    #[test]
    fn an_allowed_user_preload_comes_after_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let env = HashMap::from([("LD_PRELOAD".to_string(), "/opt/tool.so".to_string())]);
        let check = Some(Impl::Mpich);
        let (_, v) = preload(tmp.path(), check, false, &env, &BTreeSet::new())
            .unwrap()
            .unwrap();
        assert!(!v.contains("tool.so"), "{v}");
        let allow = BTreeSet::from(["LD_PRELOAD".to_string()]);
        let (_, v) = preload(tmp.path(), check, false, &env, &allow)
            .unwrap()
            .unwrap();
        assert!(v.ends_with(".so:/opt/tool.so"), "{v}");
    }

    #[test]
    fn a_base_others_may_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("shared");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = preload(
            &base,
            Some(Impl::OpenMpi),
            false,
            &HashMap::new(),
            &BTreeSet::new(),
        )
        .unwrap_err();
        assert!(
            err.contains("--mpi-check") && err.contains("writable by it alone"),
            "{err}"
        );
    }
}
