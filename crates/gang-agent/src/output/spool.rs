//! A job's output spool on the node's disk: where a rank's output goes while the master
//! cannot take it, so that the rank keeps running and nothing is lost up to the job's
//! bound (`OutboxConfig::spool_cap`).
//!
//! One file per job, `DIR/JOB.spool` (mode 0600, in the agent's own directory): chunks
//! are appended and read back by their place when their turn in the outbox comes; the file
//! is removed as soon as nothing spooled is waiting, so the bound is on what is pending,
//! not on what passed through.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug)]
struct JobSpool {
    file: File,
    path: PathBuf,
    /// The end of the file: where the next chunk goes.
    end: u64,
    /// Bytes spooled and not yet read back.
    pending: u64,
}

/// Every job's spool on this node.
#[derive(Debug)]
pub struct Spools {
    dir: PathBuf,
    cap: u64,
    jobs: HashMap<u64, JobSpool>,
}

/// Why a chunk was not spooled.
#[derive(Debug)]
pub enum SpoolRefused {
    /// The job's spool holds its bound already.
    Full,
    Io(io::Error),
}

impl Spools {
    /// Spools in `dir`, each holding at most `cap` bytes pending.
    pub fn new(dir: PathBuf, cap: u64) -> Spools {
        Spools {
            dir,
            cap,
            jobs: HashMap::new(),
        }
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Make the directory (0700) and remove what an earlier agent left: those ranks are
    /// gone, and their output with them.
    pub fn prepare(dir: &Path) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        for entry in std::fs::read_dir(dir)?.flatten() {
            if entry.path().extension().is_some_and(|e| e == "spool") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    /// Append `data` to `job`'s spool; returns where it starts.
    pub fn put(&mut self, job: u64, data: &[u8]) -> Result<u64, SpoolRefused> {
        let len = data.len() as u64;
        let pending = self.jobs.get(&job).map_or(0, |s| s.pending);
        if pending + len > self.cap {
            return Err(SpoolRefused::Full);
        }
        let s = match self.jobs.entry(job) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = self.dir.join(format!("{job}.spool"));
                let file = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(SpoolRefused::Io)?;
                e.insert(JobSpool {
                    file,
                    path,
                    end: 0,
                    pending: 0,
                })
            }
        };
        let at = s.end;
        s.file.write_all_at(data, at).map_err(SpoolRefused::Io)?;
        s.end += len;
        s.pending += len;
        Ok(at)
    }

    /// Read back `len` bytes of `job`'s spool from `at`, and count them as no longer
    /// pending (the file goes once nothing is).
    pub fn take(&mut self, job: u64, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let Some(s) = self.jobs.get_mut(&job) else {
            return Err(io::Error::other(format!("no spool for job {job}")));
        };
        let mut buf = vec![0u8; len];
        let read = s.file.read_exact_at(&mut buf, at);
        s.pending = s.pending.saturating_sub(len as u64);
        if s.pending == 0 {
            let s = self.jobs.remove(&job).expect("present");
            let _ = std::fs::remove_file(&s.path);
        }
        read.map(|()| buf)
    }

    /// Bytes pending in `job`'s spool.
    pub fn pending(&self, job: u64) -> u64 {
        self.jobs.get(&job).map_or(0, |s| s.pending)
    }
}

impl Drop for Spools {
    fn drop(&mut self) {
        for s in self.jobs.values() {
            let _ = std::fs::remove_file(&s.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_back_and_the_file_goes_when_nothing_is_pending() {
        let dir = tempfile::tempdir().unwrap();
        Spools::prepare(dir.path()).unwrap();
        let mut s = Spools::new(dir.path().to_path_buf(), 10);
        let a = s.put(7, b"hello").unwrap();
        let b = s.put(7, b"world").unwrap();
        assert!(matches!(s.put(7, b"!"), Err(SpoolRefused::Full)));
        assert!(dir.path().join("7.spool").exists());
        assert_eq!(s.take(7, a, 5).unwrap(), b"hello");
        assert_eq!(s.pending(7), 5);
        // Room again: the bound is on what is pending.
        let c = s.put(7, b"!").unwrap();
        assert_eq!(s.take(7, b, 5).unwrap(), b"world");
        assert_eq!(s.take(7, c, 1).unwrap(), b"!");
        assert_eq!(s.pending(7), 0);
        assert!(!dir.path().join("7.spool").exists());
    }

    #[test]
    fn prepare_removes_spools_an_earlier_agent_left() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("3.spool"), b"old").unwrap();
        std::fs::write(dir.path().join("keep.txt"), b"x").unwrap();
        Spools::prepare(dir.path()).unwrap();
        assert!(!dir.path().join("3.spool").exists());
        assert!(dir.path().join("keep.txt").exists());
    }
}
