//! `prun --mpi-check`: the PMPI interposition library the agent preloads into an MPI
//! rank, built at compile time for each MPI implementation found (`build.rs`) and
//! embedded here, so an agent binary carries it and no install step is needed.
//!
//! The library writes the rank's state page (`$GANG_MSG_DIR/state.page`) the way the
//! messaging library does: blocked-since, the source and tag waited for, messages posted
//! and delivered. The agent reads it into heartbeats and the master's deadlock check runs
//! unchanged. `README.md` has the accounting rules and why they never flag a live job.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// An MPI implementation with an ABI of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Impl {
    Mpich,
    OpenMpi,
}

impl Impl {
    pub fn name(self) -> &'static str {
        match self {
            Impl::Mpich => "MPICH",
            Impl::OpenMpi => "Open MPI",
        }
    }

    /// The compiler wrapper the library is built with (`GANG_MPICC_MPICH` /
    /// `GANG_MPICC_OPENMPI` at build time override it).
    pub fn mpicc(self) -> &'static str {
        match self {
            Impl::Mpich => "mpicc.mpich",
            Impl::OpenMpi => "mpicc.openmpi",
        }
    }

    fn file_stem(self) -> &'static str {
        match self {
            Impl::Mpich => "mpich",
            Impl::OpenMpi => "openmpi",
        }
    }
}

#[cfg(gang_mpi_check_mpich)]
static MPICH: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libgang_mpi_check_mpich.so"
)));
#[cfg(not(gang_mpi_check_mpich))]
static MPICH: Option<&[u8]> = None;

#[cfg(gang_mpi_check_openmpi)]
static OPENMPI: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libgang_mpi_check_openmpi.so"
)));
#[cfg(not(gang_mpi_check_openmpi))]
static OPENMPI: Option<&[u8]> = None;

/// The library built for `imp`, or None when its mpicc was missing at build time.
pub fn library(imp: Impl) -> Option<&'static [u8]> {
    match imp {
        Impl::Mpich => MPICH,
        Impl::OpenMpi => OPENMPI,
    }
}

/// Why the library for an implementation cannot be used.
#[derive(Debug)]
pub enum InstallError {
    /// This binary was built without it.
    NotBuilt(Impl),
    Io(PathBuf, io::Error),
    /// The directory is not the installer's own (someone else made it, or a symlink).
    Untrusted(PathBuf, String),
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::NotBuilt(imp) => write!(
                f,
                "the {} checking library was not built into this binary ({} was not found when gang-mpi-check was compiled)",
                imp.name(),
                imp.mpicc()
            ),
            InstallError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            InstallError::Untrusted(p, why) => write!(
                f,
                "{}: {why}: will not preload a library from there",
                p.display()
            ),
        }
    }
}

impl std::error::Error for InstallError {}

/// FNV-1a: names the file by its content, so an upgraded agent never overwrites a
/// library that running ranks have mapped, and agents sharing a host agree on it.
fn content_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Write the library for `imp` into `dir`: [`install_library`].
pub fn install(dir: &Path, imp: Impl) -> Result<PathBuf, InstallError> {
    let bytes = library(imp).ok_or(InstallError::NotBuilt(imp))?;
    install_library(dir, &format!("gang_mpi_check_{}", imp.file_stem()), bytes)
}

/// Write a library that ranks preload, `bytes`, into `dir` (made 0755 if missing; it must
/// be a real directory owned by this process's user and writable by no one else) as
/// `lib{stem}-{hash}.so`, mode 0644, unless the same content is there already. Returns
/// its path. Safe to call from several processes at once: each writes a temporary file
/// and renames it into place.
pub fn install_library(dir: &Path, stem: &str, bytes: &[u8]) -> Result<PathBuf, InstallError> {
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |e| InstallError::Io(p, e)
    };
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(InstallError::Io(dir.to_path_buf(), e)),
    }
    // The ranks load what is here with the job's credentials: only the installer's user
    // may be able to put it there.
    let meta = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(InstallError::Untrusted(
            dir.into(),
            "not a directory".into(),
        ));
    }
    if meta.uid() != me {
        return Err(InstallError::Untrusted(
            dir.into(),
            format!("owned by uid {}, not {me}", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(InstallError::Untrusted(
            dir.into(),
            format!("writable by others (mode {:o})", meta.mode() & 0o7777),
        ));
    }
    let path = dir.join(format!("lib{stem}-{:016x}.so", content_hash(bytes)));
    if let Ok(existing) = std::fs::read(&path)
        && existing == bytes
    {
        return Ok(path);
    }
    let tmp = dir.join(format!(".lib{stem}.{}.tmp", std::process::id()));
    let write = || -> io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        InstallError::Io(path.clone(), e)
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_with_mode_0644_and_refuses_a_shared_directory() {
        let Some(_) = library(Impl::Mpich) else {
            panic!("{}", InstallError::NotBuilt(Impl::Mpich));
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mpi-check");
        let a = install(&dir, Impl::Mpich).unwrap();
        let b = install(&dir, Impl::Mpich).unwrap();
        assert_eq!(a, b);
        let meta = std::fs::metadata(&a).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o644);
        assert_eq!(std::fs::read(&a).unwrap(), library(Impl::Mpich).unwrap());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = install(&dir, Impl::Mpich).unwrap_err().to_string();
        assert!(err.contains("writable by others"), "{err}");
    }
}
