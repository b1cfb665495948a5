//! Job output: every chunk an agent pushes is appended to a per-job log file in the state
//! directory, and readers are told the new length. An attached client reads the log from
//! the start and then follows it, so output produced before it attached, or before a
//! master restart, is never missing, and a slow client can never make a fast job wait.
//!
//!
//! Output an agent pushed says where it starts, and so does its record: the log is
//! idempotent. With several masters (etcd) the logs live on storage they share, and a
//! master deposed while it was paused in the middle of a push writes it when it wakes up,
//! after the new leader has written it and more. Readers, and a master that opens a log,
//! take each byte of a stream once (`Coverage`), whoever wrote it and how often; a writer
//! first takes in what others appended since its last write.

mod records;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gang_proto::v1;

use crate::job::OutStream;
use tokio::sync::watch;

pub use records::Cursor;
use records::{AT, AT_HEADER, Coverage, HEADER, NOTICE, read_records, record, scan_records};

struct JobLog {
    file: File,
    len: u64,
    notify: watch::Sender<u64>,
    /// Where the next new byte of each (rank, stream) starts.
    have: Coverage,
    /// Bytes of each (rank, stream) the log holds (gaps and what the cap kept out are
    /// not counted): compared with what a rank wrote, what was lost.
    logged: HashMap<(u32, i32), u64>,
}

pub struct OutputHub {
    dir: PathBuf,
    logs: Mutex<HashMap<u64, Arc<Mutex<JobLog>>>>,
    /// Output kept per job; beyond it, output is dropped after one notice.
    max_bytes: u64,
}

/// The most output data a reader gets of a log at once, a record split if need be. The
/// relay of an Attach holds at most a few such pieces per stream (read, queued, being
/// encoded), so N open attaches cost O(N x piece), whatever the size of the log or of its
/// records (an agent's push may carry a 1 MiB record).
pub const READ_MAX: u64 = 64 * 1024;
/// Above this many open logs, idle ones are closed (each holds a file descriptor).
const MAX_OPEN_LOGS: usize = 256;

impl OutputHub {
    /// Logs live in `dir` (mode 0700; each log 0600): output is readable by the master
    /// alone, which serves it to the job's owner and admins only.
    pub fn new(dir: PathBuf, max_bytes: u64) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(OutputHub {
            dir,
            logs: Mutex::new(HashMap::new()),
            max_bytes,
        })
    }

    fn log(&self, job: u64) -> std::io::Result<Arc<Mutex<JobLog>>> {
        let mut logs = self.logs.lock().expect("output map lock");
        if let Some(l) = logs.get(&job) {
            return Ok(l.clone());
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(self.dir.join(format!("{job}.out")))?;
        let (notify, _) = watch::channel(0);
        let mut log = JobLog {
            file,
            len: 0,
            notify,
            have: Coverage::default(),
            logged: HashMap::new(),
        };
        // After a restart, what each stream already has is what the log holds.
        log.take_in_others()?;
        let l = Arc::new(Mutex::new(log));
        logs.insert(job, l.clone());
        if logs.len() > MAX_OPEN_LOGS {
            // Close the logs nobody follows or writes now (ended jobs, mostly); one is
            // reopened, and its `have` rebuilt from the file, if it is needed again.
            logs.retain(|_, l| {
                Arc::strong_count(l) > 1
                    || l.lock()
                        .map(|l| l.notify.receiver_count() > 0)
                        .unwrap_or(true)
            });
        }
        Ok(l)
    }

    /// How many log files are open now.
    pub fn open_logs(&self) -> usize {
        self.logs.lock().expect("output map lock").len()
    }

    /// Append chunks for `job` and wake its readers. Bytes of a chunk with an offset that
    /// the log already has (a push retried after its acknowledgment was lost) are dropped.
    pub fn append(&self, job: u64, chunks: &[v1::Output]) -> std::io::Result<()> {
        let log = self.log(job)?;
        let mut l = log.lock().expect("job log lock");
        l.take_in_others()?;
        let mut buf = Vec::with_capacity(chunks.iter().map(|c| c.data.len() + AT_HEADER).sum());
        let notice = truncation_notice(job, self.max_bytes);
        // Room left before the cap, keeping space for the notice (written once, at the cap).
        let room = |used: u64| {
            self.max_bytes
                .saturating_sub(used + (HEADER + notice.len()) as u64)
        };
        let mut full = l.len + (HEADER + notice.len()) as u64 >= self.max_bytes;
        for c in chunks.iter().filter(|c| !c.data.is_empty()) {
            // Only the two streams are logged: a stream byte must not read as `AT` or
            // `NOTICE`.
            let Ok(stream) = u8::try_from(c.stream) else {
                continue;
            };
            if stream & AT != 0 {
                continue;
            }
            // An offset no stream can reach (its end past u64) is not output: `fresh`
            // drops it rather than let it mark the stream as having everything.
            let skip = l
                .have
                .fresh(c.rank, c.stream, c.offset, c.data.len() as u64)
                as usize;
            let data = &c.data[skip..];
            if data.is_empty() || full {
                continue;
            }
            let at = c.offset.map(|off| off + skip as u64);
            let header = if at.is_some() { AT_HEADER } else { HEADER };
            let left = room(l.len + buf.len() as u64 + header as u64) as usize;
            if data.len() > left {
                // With no room for data, an empty record would push the notice past the cap.
                if left > 0 {
                    record(&mut buf, c.rank, stream, at, &data[..left]);
                    *l.logged.entry((c.rank, c.stream)).or_default() += left as u64;
                }
                record(&mut buf, c.rank, NOTICE, None, notice.as_bytes());
                full = true;
                continue;
            }
            record(&mut buf, c.rank, stream, at, data);
            *l.logged.entry((c.rank, c.stream)).or_default() += data.len() as u64;
        }
        if buf.is_empty() {
            return Ok(());
        }
        l.file.write_all(&buf)?;
        // Read back where it landed (another master may have appended in between): this
        // write's own records are had already, others' are taken in.
        l.take_in_others()
    }

    /// What of a rank's streams the log lacks, given how much it wrote to each (its exit
    /// report): only streams with bytes missing.
    pub fn lost(
        &self,
        job: u64,
        rank: u32,
        stdout_bytes: u64,
        stderr_bytes: u64,
    ) -> std::io::Result<Vec<(OutStream, u64)>> {
        if stdout_bytes == 0 && stderr_bytes == 0 {
            return Ok(vec![]);
        }
        let log = self.log(job)?;
        let l = log.lock().expect("job log lock");
        let logged = |s: v1::Stream| l.logged.get(&(rank, s as i32)).copied().unwrap_or(0);
        Ok([
            (OutStream::Stdout, stdout_bytes, logged(v1::Stream::Stdout)),
            (OutStream::Stderr, stderr_bytes, logged(v1::Stream::Stderr)),
        ]
        .into_iter()
        .filter(|&(_, wrote, have)| wrote > have)
        .map(|(s, wrote, have)| (s, wrote - have))
        .collect())
    }

    /// Follow `job`'s log: a receiver of its length as it grows.
    pub fn follow(&self, job: u64) -> std::io::Result<watch::Receiver<u64>> {
        let log = self.log(job)?;
        let l = log.lock().expect("job log lock");
        Ok(l.notify.subscribe())
    }

    /// The output from `at` up to `to` (a record boundary), at most `max` bytes of data
    /// (at least one byte, or one empty record): the new part of each record, the last
    /// one cut if it does not fit; `at` moves to where the next read starts.
    pub fn read(
        &self,
        job: u64,
        at: &mut Cursor,
        to: u64,
        max: u64,
    ) -> std::io::Result<Vec<v1::Output>> {
        if to <= at.record {
            return Ok(vec![]);
        }
        let log = self.log(job)?;
        let l = log.lock().expect("job log lock");
        read_records(&l.file, at, to, max.max(1))
    }
}

impl JobLog {
    /// Take in what was appended to the file since this log last knew its length (by
    /// another master: the log may be on storage several share), or all of it when just
    /// opened. Only whole records: one still being written is taken in next time.
    fn take_in_others(&mut self) -> std::io::Result<()> {
        let on_disk = self.file.metadata()?.len();
        if on_disk <= self.len {
            return Ok(());
        }
        let mut at = self.len;
        for r in scan_records(&self.file, at, on_disk)? {
            let skip = self.have.take(&r);
            if r.stream != NOTICE {
                *self
                    .logged
                    .entry((r.rank, i32::from(r.stream)))
                    .or_default() += r.len - skip;
            }
            at = r.end;
        }
        self.len = at;
        self.notify.send_replace(at);
        Ok(())
    }
}

#[cfg(test)]
impl OutputHub {
    /// The whole log up to `len`, read as a follower reads it.
    pub fn read_all(&self, job: u64, len: u64) -> std::io::Result<Vec<v1::Output>> {
        let (mut all, mut at) = (vec![], Cursor::default());
        while at.record < len {
            // No bound: records come whole, as they were appended.
            let before = at.position();
            all.extend(self.read(job, &mut at, len, u64::MAX)?);
            if at.position() == before {
                return Err(std::io::Error::other("no progress"));
            }
        }
        Ok(all)
    }

    /// Each record's size (header and data) in the first `len` bytes of `job`'s log.
    pub fn record_sizes(&self, job: u64, len: u64) -> std::io::Result<Vec<u64>> {
        let log = self.log(job)?;
        let l = log.lock().expect("job log lock");
        let mut at = 0;
        Ok(scan_records(&l.file, 0, len)?
            .into_iter()
            .map(|r| {
                let size = r.end - at;
                at = r.end;
                size
            })
            .collect())
    }
}

fn truncation_notice(job: u64, max: u64) -> String {
    format!("\n[gang: output of job {job} truncated: it reached {max} bytes (max_output_bytes)]\n")
}
