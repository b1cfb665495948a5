//! `prun --output/--error`: a rank's stdout and stderr written to files on its node
//! instead of piped to the agent and relayed through the master (sbatch's `-o`/`-e`).
//!
//! The files are opened by the rank's child process after it took on the submitter's
//! credentials and entered the job's working directory (`launch::command`'s `pre_exec`),
//! so a rank can only write where its user may: the agent, often root, never opens a
//! user's file for them. The directory is checked here, as the user (`launch::lookup`),
//! so that the usual mistake (a directory that does not exist) is reported with the
//! file's name, and nothing the user could not see is told.
//!
//! In a directory others may write (a sticky /tmp), a file of the name may be someone
//! else's: a symbolic link is not followed (`O_NOFOLLOW`), a regular file another user
//! owns is refused (EPERM), and a FIFO does not block the open (`O_NONBLOCK`). A file of
//! the rank's own is emptied only once it is known to be the user's own.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gang_core::job::output_pattern;

/// One file a rank's stream goes to, ready for the forked child (nothing to allocate).
#[derive(Debug, Clone)]
struct FileSpec {
    path: CString,
    flags: libc::c_int,
    /// Emptied once opened (and known to be the user's own).
    truncate: bool,
    /// For messages.
    shown: PathBuf,
}

/// Marks on the errno a failed open sends from the child: the spawn's error carries only
/// an errno, and without them an output file the user may not write would read as
/// "cannot start the program: Permission denied". Far above any real errno.
const STDOUT_FAILED: i32 = 1 << 20;
const STDERR_FAILED: i32 = 1 << 21;

/// Where a rank's stderr goes.
#[derive(Debug, Clone, Default)]
enum Stderr {
    #[default]
    Pipe,
    File(FileSpec),
    /// The same file as stdout: one open file, so the two streams never overwrite each
    /// other's bytes.
    Stdout,
}

/// A rank's output files (none: both streams piped).
#[derive(Debug, Clone, Default)]
pub struct RankFiles {
    stdout: Option<FileSpec>,
    stderr: Stderr,
}

/// Why the files cannot be used: the file's path and the error.
pub type FileError = (PathBuf, io::Error);

impl RankFiles {
    /// The files for one rank from the job's patterns (`LaunchRequest.output`/`.error`,
    /// empty: piped). As sbatch: with only `output`, stderr goes to the same file.
    pub fn new(
        output: &str,
        error: &str,
        (job, rank): (u64, u32),
        node: (u32, u32),
        cwd: &Path,
    ) -> Result<RankFiles, FileError> {
        let spec = |pattern: &str| -> Result<(PathBuf, FileSpec), FileError> {
            let path = cwd.join(output_pattern::expand(pattern, job, rank, node));
            let bad = |e| (path.clone(), e);
            output_pattern::validate(pattern)
                .map_err(|e| bad(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
            if let Some(dir) = path.parent() {
                match std::fs::metadata(dir) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        return Err(bad(io::Error::new(
                            io::ErrorKind::NotADirectory,
                            format!("{} is not a directory", dir.display()),
                        )));
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(bad(io::Error::new(
                            io::ErrorKind::NotFound,
                            format!("the directory {} does not exist", dir.display()),
                        )));
                    }
                    Err(e) => return Err(bad(e)),
                }
            }
            let flags = libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_APPEND
                | libc::O_CLOEXEC
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK;
            // A file of its own starts empty, as sbatch's; one that ranks share is only
            // appended to, or a rank opening it late would erase what others wrote.
            let truncate = output_pattern::per_rank(pattern);
            let c = CString::new(path.as_os_str().as_bytes())
                .map_err(|e| bad(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
            let shown = path.clone();
            Ok((
                path,
                FileSpec {
                    path: c,
                    flags,
                    truncate,
                    shown,
                },
            ))
        };
        let mut files = RankFiles::default();
        let mut out_path = None;
        if !output.is_empty() {
            let (p, f) = spec(output)?;
            out_path = Some(p);
            files.stdout = Some(f);
        }
        files.stderr = match (error.is_empty(), &out_path) {
            (true, None) => Stderr::Pipe,
            (true, Some(_)) => Stderr::Stdout,
            (false, _) => {
                let (p, f) = spec(error)?;
                if out_path.as_ref() == Some(&p) {
                    Stderr::Stdout
                } else {
                    Stderr::File(f)
                }
            }
        };
        Ok(files)
    }

    /// Whether stdout goes to the agent (and on to the master).
    pub fn stdout_piped(&self) -> bool {
        self.stdout.is_none()
    }

    /// Whether stderr goes to the agent.
    pub fn stderr_piped(&self) -> bool {
        matches!(self.stderr, Stderr::Pipe)
    }

    /// Open the files onto fds 1 and 2. Only in the forked child, as the user, in the
    /// job's directory: open, dup2 and close are async-signal-safe, and the paths were
    /// made before the fork.
    pub fn redirect(&self) -> io::Result<()> {
        // Errors are built from errnos: no allocation in the child.
        let marked = |mark: i32| {
            move |e: io::Error| {
                io::Error::from_raw_os_error(mark | e.raw_os_error().unwrap_or(libc::EIO))
            }
        };
        if let Some(f) = &self.stdout {
            onto(f, libc::STDOUT_FILENO).map_err(marked(STDOUT_FAILED))?;
        }
        match &self.stderr {
            Stderr::Pipe => Ok(()),
            Stderr::File(f) => onto(f, libc::STDERR_FILENO).map_err(marked(STDERR_FAILED)),
            // SAFETY: a plain system call on two open descriptors.
            Stderr::Stdout => match unsafe { libc::dup2(libc::STDOUT_FILENO, libc::STDERR_FILENO) }
            {
                -1 => Err(io::Error::last_os_error()),
                _ => Ok(()),
            },
        }
    }
}

impl RankFiles {
    /// A spawn error that is [`redirect`](Self::redirect)'s: the file and the OS error.
    pub fn explain(&self, e: &io::Error) -> Option<FileError> {
        let raw = e.raw_os_error()?;
        let errno = io::Error::from_raw_os_error(raw & !(STDOUT_FAILED | STDERR_FAILED));
        if raw & STDOUT_FAILED != 0 {
            Some((self.stdout.as_ref()?.shown.clone(), errno))
        } else if raw & STDERR_FAILED != 0 {
            match &self.stderr {
                Stderr::File(f) => Some((f.shown.clone(), errno)),
                _ => None,
            }
        } else {
            None
        }
    }
}

/// Open `f` and make it `fd` (the opened descriptor is close-on-exec; its dup is not). A
/// regular file another user owns is refused (EPERM); a file of the user's own that the
/// rank owns alone is emptied.
fn onto(f: &FileSpec, fd: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system calls on a valid C string and a descriptor this opened; the
    // stat buffer is written by fstat before it is read.
    unsafe {
        let opened = libc::open(f.path.as_ptr(), f.flags, 0o644 as libc::c_uint);
        if opened < 0 {
            return Err(io::Error::last_os_error());
        }
        let fail = |errno: i32| {
            libc::close(opened);
            Err(io::Error::from_raw_os_error(errno))
        };
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(opened, &mut st) != 0 {
            return fail(*libc::__errno_location());
        }
        let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
        if regular && st.st_uid != libc::geteuid() {
            return fail(libc::EPERM);
        }
        if regular && f.truncate && libc::ftruncate(opened, 0) != 0 {
            return fail(*libc::__errno_location());
        }
        // Back to blocking writes (O_NONBLOCK was for the open of a FIFO).
        let fl = libc::fcntl(opened, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(opened, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
        let r = libc::dup2(opened, fd);
        libc::close(opened);
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_follows_stdout_unless_told_otherwise() {
        let cwd = Path::new("/tmp");
        let f = RankFiles::new("%j.out", "", (7, 1), (0, 1), cwd).unwrap();
        assert!(!f.stdout_piped() && !f.stderr_piped());
        assert!(matches!(f.stderr, Stderr::Stdout));
        assert_eq!(
            f.stdout.as_ref().unwrap().path.to_str().unwrap(),
            "/tmp/7.out"
        );
        assert!(!f.stdout.as_ref().unwrap().truncate);
        assert_ne!(f.stdout.as_ref().unwrap().flags & libc::O_NOFOLLOW, 0);

        let f = RankFiles::new("", "err-%r-%n", (7, 1), (0, 1), cwd).unwrap();
        assert!(f.stdout_piped() && !f.stderr_piped());
        match &f.stderr {
            Stderr::File(s) => {
                assert_eq!(s.path.to_str().unwrap(), "/tmp/err-1-0-1");
                assert!(s.truncate);
                assert_eq!(s.flags & libc::O_TRUNC, 0, "emptied only once checked");
            }
            other => panic!("{other:?}"),
        }

        let f = RankFiles::new("same-%r", "same-%r", (7, 1), (0, 1), cwd).unwrap();
        assert!(matches!(f.stderr, Stderr::Stdout));
        let f = RankFiles::new("", "", (7, 1), (0, 1), cwd).unwrap();
        assert!(f.stdout_piped() && f.stderr_piped());
    }

    #[test]
    fn a_failed_open_in_the_child_names_its_file() {
        let f = RankFiles::new("o-%r", "e-%r", (7, 1), (0, 1), Path::new("/tmp")).unwrap();
        let e = io::Error::from_raw_os_error(STDERR_FAILED | libc::EACCES);
        let (path, source) = f.explain(&e).unwrap();
        assert_eq!(path, Path::new("/tmp/e-1"));
        assert_eq!(source.raw_os_error(), Some(libc::EACCES));
        let e = io::Error::from_raw_os_error(STDOUT_FAILED | libc::EISDIR);
        assert_eq!(f.explain(&e).unwrap().0, Path::new("/tmp/o-1"));
        assert!(
            f.explain(&io::Error::from_raw_os_error(libc::ENOENT))
                .is_none()
        );
    }

    #[test]
    fn a_missing_directory_names_the_file() {
        let (path, e) = RankFiles::new("no/such/dir/%j.out", "", (3, 0), (0, 0), Path::new("/tmp"))
            .unwrap_err();
        assert_eq!(path, Path::new("/tmp/no/such/dir/3.out"));
        assert!(
            e.to_string().contains("/tmp/no/such/dir does not exist"),
            "{e}"
        );
    }

    /// In a directory others may write: a planted symbolic link is not followed, a file
    /// another user made is refused, the user's own file is emptied (per-rank patterns).
    #[test]
    fn links_and_other_users_files_are_refused() {
        use std::os::unix::fs::{MetadataExt, symlink};
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            let f = RankFiles::new(name, "", (1, 0), (0, 0), dir.path()).unwrap();
            // A descriptor far from the test's own.
            onto(f.stdout.as_ref().unwrap(), 900).map(|()| {
                // SAFETY: closing the descriptor onto made.
                unsafe { libc::close(900) };
            })
        };
        let keep = dir.path().join("keep");
        std::fs::write(&keep, "precious").unwrap();
        // Planted under the name the pattern expands to (job 1, rank 0).
        symlink(&keep, dir.path().join("link-0")).unwrap();
        let e = open("link-%r").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
        // The user's own file: opened and emptied.
        std::fs::write(
            dir.path()
                .join("own-%r")
                .to_str()
                .unwrap()
                .replace("%r", "0"),
            "old",
        )
        .unwrap();
        open("own-%r").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("own-0")).unwrap(),
            ""
        );
        // Another user's (the test runs as root, which owns it: pretend to be another).
        let theirs = dir.path().join("theirs-0");
        std::fs::write(&theirs, "theirs").unwrap();
        let uid = std::fs::metadata(&theirs).unwrap().uid();
        if uid == 0 {
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = open("theirs-%r").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
            assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs");
        }
    }
}
