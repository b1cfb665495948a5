//! What a plan needs of this node's file system, looked up before anything is taken:
//! the working directory, the program (in the rank's PATH) and the MPI it links, the
//! output files' directory and the `--mpi-check` library. These read the file system, so
//! they are not the pure plan's; they take nothing, so a failure here leaves nothing to
//! give back.

use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use tracing::debug;

use super::as_user::with_fs_identity;
use super::failure::Failure;
use super::mpi::{MpiPlan, serve};
use super::plan::{LaunchPlan, NodeFacts, SearchPath};
use crate::launch::env_policy::DEFAULT_PATH;
use crate::launch::rank_files::RankFiles;
use crate::mpi::check as mpi_check;
use crate::mpi::program::{self as mpi_program, ProgramMpi};
use crate::request::Mpi;

/// What the node has for a plan.
#[derive(Debug)]
pub struct Found {
    /// argv[0], found.
    pub program: PathBuf,
    /// What the rank is served for MPI, decided from what the program links.
    pub mpi: MpiPlan,
    /// `prun --output/--error`: the files, ready for the child to open as the user.
    pub files: RankFiles,
    /// `--mpi-check`: the checking library's `LD_PRELOAD`.
    pub preload: Option<(String, String)>,
}

/// Look up what `plan` needs: the directory first (everything else is relative to it),
/// then the program and what it links (which decides its MPI), the output files and the
/// checking library.
pub fn look_up(plan: &LaunchPlan, msg_base: &Path, facts: &NodeFacts) -> Result<Found, Failure> {
    let req = &plan.req;
    let cwd = Path::new(&req.cwd);
    let agent_path;
    let path = match &plan.search {
        SearchPath::Request(path) => Some(OsStr::new(path)),
        SearchPath::Default => Some(OsStr::new(DEFAULT_PATH)),
        SearchPath::Agent => {
            agent_path = std::env::var_os("PATH");
            agent_path.as_deref()
        }
    };
    // What the user could not see must not be answered for them (see `as_user`): the
    // working directory, the program, and the directories of the output files.
    let (program, links, files) = with_fs_identity(&plan.run_as, || {
        check_cwd(cwd).map_err(Failure::Cwd)?;
        let program = resolve_program(&req.argv[0], path, cwd).map_err(Failure::Start)?;
        // `none` is the user's word, and the only choice that reads nothing of the
        // program.
        let links = match req.mpi {
            Mpi::None => ProgramMpi::NoMpi,
            _ => mpi_program::inspect(&program),
        };
        let files = RankFiles::new(
            &req.output,
            &req.error,
            (req.key.job_id, req.key.rank),
            (plan.node.x, plan.node.y),
            cwd,
        )
        .map_err(Failure::OutputFile)?;
        Ok((program, links, files))
    })
    .map_err(Failure::Start)??;
    let mpi = serve(plan, &links, facts).map_err(Failure::Mpi)?;
    debug!(
        job_id = req.key.job_id,
        rank = req.key.rank,
        program = %program.display(),
        links = %links,
        mpi = req.mpi.name(),
        pmix = mpi.pmix.is_some(),
        "the rank's MPI"
    );
    let preload = mpi_check::preload(
        msg_base,
        mpi.check,
        mpi.pmi.is_some(),
        &req.env,
        &facts.policy.env_allow,
    )
    .map_err(|e| Failure::Start(io::Error::other(e)))?;
    Ok(Found {
        program,
        mpi,
        files,
        preload,
    })
}

/// The working directory must exist and be a directory. Checked before spawning so the
/// error names the directory, not the program.
pub fn check_cwd(cwd: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(cwd)?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(io::Error::from(Errno::ENOTDIR))
    }
}

/// Find `argv0` the way execvp would, in `path` (the rank's PATH) relative to `cwd`.
/// A name with a slash is taken as is (relative to `cwd`). Doing the lookup here, not in
/// the child, gives a clear error and uses the rank's PATH rather than the agent's.
pub fn resolve_program(argv0: &str, path: Option<&OsStr>, cwd: &Path) -> io::Result<PathBuf> {
    if argv0.contains('/') {
        return Ok(cwd.join(argv0));
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied = false;
    for dir in std::env::split_paths(path) {
        // An empty PATH entry means the current directory, i.e. the rank's cwd.
        let candidate = cwd.join(dir).join(argv0);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate);
            }
            Ok(meta) if meta.is_file() => denied = true,
            _ => {}
        }
    }
    Err(io::Error::from(if denied {
        Errno::EACCES
    } else {
        Errno::ENOENT
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_uses_the_given_path() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(
            resolve_program("prog", Some(&path), Path::new("/")).unwrap(),
            prog
        );
        let err =
            resolve_program("prog", Some(OsStr::new("/nonexistent")), Path::new("/")).unwrap_err();
        assert_eq!(err.to_string(), "No such file or directory (os error 2)");
        // An empty entry is the rank's working directory.
        assert_eq!(
            resolve_program("prog", Some(OsStr::new(":/x")), dir.path()).unwrap(),
            prog
        );
        // A name with a slash is taken relative to the working directory.
        assert_eq!(
            resolve_program("./prog", None, dir.path()).unwrap(),
            dir.path().join("./prog")
        );
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = resolve_program("prog", Some(&path), Path::new("/")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::EACCES as i32));
    }

    #[test]
    fn cwd_must_be_a_directory() {
        assert_eq!(
            check_cwd(Path::new("/nope")).unwrap_err().to_string(),
            "No such file or directory (os error 2)"
        );
        assert_eq!(
            check_cwd(Path::new("/proc/self/status"))
                .unwrap_err()
                .to_string(),
            "Not a directory (os error 20)"
        );
        check_cwd(Path::new("/")).unwrap();
    }
}
