//! Job output: every chunk an agent pushes is appended to a per-job log file in the state
//! directory, and readers are told the new length. An attached client reads the log from
//! the start and then follows it, so output produced before it attached, or before a
//! master restart, is never missing, and a slow client can never make a fast job wait.
//!
//! Record format: rank (u32 LE), stream (u8), length (u32 LE), then, when the stream
//! byte has `AT` set, where the data starts in the rank's stream (u64 LE), then the data.
//! The master's own notices (a log at its cap) are records of stream `NOTICE`, read out as
//! stderr: what a rank wrote is told apart from them, so the log knows how much of each
//! stream it holds.
//!
//! Output an agent pushed says where it starts, and so does its record: the log is
//! idempotent. With several masters (etcd) the logs live on storage they share, and a
//! master deposed while it was paused in the middle of a push writes it when it wakes up,
//! after the new leader has written it and more. Readers, and a master that opens a log,
//! take each byte of a stream once (`Coverage`), whoever wrote it and how often; a writer
//! first takes in what others appended since its last write.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gang_proto::v1;

use crate::job::OutStream;
use tokio::sync::watch;

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

/// How far each (rank, stream) has come, record after record: what of a record is new.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Coverage(HashMap<(u32, i32), u64>);

impl Coverage {
    /// The part of `len` bytes starting at `at` (None: right after what came before) of
    /// `rank`'s `stream` that is new, as an offset into them (`len` when none is); taken.
    /// Bytes past the end so far (a gap: output the agent had to drop) are new.
    fn fresh(&mut self, rank: u32, stream: i32, at: Option<u64>, len: u64) -> u64 {
        let have = self.0.entry((rank, stream)).or_default();
        match at {
            None => {
                *have = have.saturating_add(len);
                0
            }
            Some(off) => {
                let Some(end) = off.checked_add(len) else {
                    return len;
                };
                if end <= *have {
                    return len;
                }
                let skip = have.saturating_sub(off);
                *have = end;
                skip
            }
        }
    }

    /// Take in a record read from a log: what of its data is new (an offset into it).
    fn take(&mut self, r: &RecordHead) -> u64 {
        if r.stream == NOTICE {
            0
        } else {
            self.fresh(r.rank, i32::from(r.stream), r.at, r.len)
        }
    }
}

pub struct OutputHub {
    dir: PathBuf,
    logs: Mutex<HashMap<u64, Arc<Mutex<JobLog>>>>,
    /// Output kept per job; beyond it, output is dropped after one notice.
    max_bytes: u64,
}

const HEADER: usize = 9;
/// A record whose data says where it starts: `HEADER` and the offset.
const AT_HEADER: usize = HEADER + 8;
/// The stream byte of the master's own notices.
const NOTICE: u8 = 255;
/// Set in the stream byte of a record that carries its offset.
const AT: u8 = 0x80;
/// The most output data a reader gets of a log at once, a record split if need be. The
/// relay of an Attach holds at most a few such pieces per stream (read, queued, being
/// encoded), so N open attaches cost O(N x piece), whatever the size of the log or of its
/// records (an agent's push may carry a 1 MiB record).
pub const READ_MAX: u64 = 64 * 1024;
/// The most records a reader gets at once: many tiny records must not cost more in
/// `Output` messages than `READ_MAX` of data does.
const READ_RECORDS: usize = 256;
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

/// Where a reader is in a log: the record it is in (its offset), how many bytes of that
/// record's data it has had already (or skipped: had from an earlier record), and how far
/// each stream has come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub record: u64,
    pub taken: u64,
    seen: Coverage,
}

impl Cursor {
    /// Where it is, to tell whether a read moved on.
    pub fn position(&self) -> (u64, u64) {
        (self.record, self.taken)
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

/// A record's header: whose, which stream (without `AT`), how long, where its data
/// starts in the stream if it says, and where the data and the record end in the log.
struct RecordHead {
    rank: u32,
    stream: u8,
    len: u64,
    at: Option<u64>,
    data: u64,
    end: u64,
}

/// The header of the record at `at`, if the whole record lies before `to`.
fn head(file: &File, at: u64, to: u64) -> std::io::Result<Option<RecordHead>> {
    if at + HEADER as u64 > to {
        return Ok(None);
    }
    let mut b = [0u8; AT_HEADER];
    file.read_exact_at(&mut b[..HEADER], at)?;
    let stream = b[4];
    let with_at = stream != NOTICE && stream & AT != 0;
    let header = if with_at { AT_HEADER } else { HEADER } as u64;
    if at + header > to {
        return Ok(None);
    }
    if with_at {
        file.read_exact_at(&mut b[HEADER..], at + HEADER as u64)?;
    }
    let len = u64::from(u32::from_le_bytes(b[5..9].try_into().expect("4 bytes")));
    let r = RecordHead {
        rank: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
        stream: if with_at { stream & !AT } else { stream },
        len,
        at: with_at.then(|| u64::from_le_bytes(b[9..17].try_into().expect("8 bytes"))),
        data: at + header,
        end: at + header + len,
    };
    Ok((r.end <= to).then_some(r))
}

/// The headers of the whole records from `from` up to `to` (reading headers only).
fn scan_records(file: &File, from: u64, to: u64) -> std::io::Result<Vec<RecordHead>> {
    let mut out = vec![];
    let mut at = from;
    while let Some(r) = head(file, at, to)? {
        at = r.end;
        out.push(r);
    }
    Ok(out)
}

/// Parse the output from `from` toward `to`: whole records, the first one from where the
/// reader left it, the last one cut at `max` bytes of data in all. Returns them and where
/// the next read starts.
fn read_records(
    file: &File,
    at: &mut Cursor,
    to: u64,
    max: u64,
) -> std::io::Result<Vec<v1::Output>> {
    let mut out = vec![];
    let mut taken = 0u64;
    while taken < max && out.len() < READ_RECORDS {
        let Some(r) = head(file, at.record, to)? else {
            break;
        };
        if at.taken == 0 {
            // A record begun: what of it this reader had already (from an earlier record
            // of the same bytes) is skipped.
            at.taken = at.seen.take(&r);
            if at.taken >= r.len && r.len > 0 {
                at.record = r.end;
                at.taken = 0;
                continue;
            }
        }
        let want = (r.len - at.taken.min(r.len)).min(max - taken);
        let mut data = vec![0u8; want as usize];
        file.read_exact_at(&mut data, r.data + at.taken)?;
        out.push(v1::Output {
            rank: r.rank,
            // The master's notices read as the rank's stderr.
            stream: if r.stream == NOTICE {
                v1::Stream::Stderr as i32
            } else {
                i32::from(r.stream)
            },
            data,
            offset: None,
        });
        taken += want;
        if at.taken + want < r.len {
            at.taken += want;
        } else {
            at.record = r.end;
            at.taken = 0;
        }
    }
    Ok(out)
}

fn record(buf: &mut Vec<u8>, rank: u32, stream: u8, at: Option<u64>, data: &[u8]) {
    buf.extend_from_slice(&rank.to_le_bytes());
    buf.push(if at.is_some() { stream | AT } else { stream });
    buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
    if let Some(off) = at {
        buf.extend_from_slice(&off.to_le_bytes());
    }
    buf.extend_from_slice(data);
}

fn truncation_notice(job: u64, max: u64) -> String {
    format!("\n[gang: output of job {job} truncated: it reached {max} bytes (max_output_bytes)]\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole records from `from` (a record boundary) to `to`.
    fn records(hub: &OutputHub, job: u64, from: u64, to: u64) -> Vec<v1::Output> {
        let mut at = Cursor {
            record: from,
            ..Cursor::default()
        };
        hub.read(job, &mut at, to, u64::MAX).unwrap()
    }

    fn chunk(rank: u32, stream: v1::Stream, data: &str) -> v1::Output {
        v1::Output {
            rank,
            stream: stream as i32,
            data: data.as_bytes().to_vec(),
            offset: None,
        }
    }

    fn at(offset: u64, data: &str) -> v1::Output {
        v1::Output {
            rank: 0,
            stream: v1::Stream::Stdout as i32,
            data: data.as_bytes().to_vec(),
            offset: Some(offset),
        }
    }

    #[test]
    fn retried_pushes_are_not_logged_twice_even_across_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let text = |hub: &OutputHub| {
            let len = *hub.follow(1).unwrap().borrow();
            let chunks = records(hub, 1, 0, len);
            String::from_utf8(chunks.into_iter().flat_map(|c| c.data).collect()).unwrap()
        };
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        hub.append(1, &[at(0, "one\n")]).unwrap();
        hub.append(1, &[at(0, "one\n")]).unwrap(); // the same push again
        hub.append(1, &[at(2, "e\ntwo\n")]).unwrap(); // overlapping the end
        assert_eq!(text(&hub), "one\ntwo\n");
        drop(hub);
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        hub.append(1, &[at(4, "two\n"), at(8, "three\n")]).unwrap();
        assert_eq!(text(&hub), "one\ntwo\nthree\n");
        // A gap (output the agent dropped) is kept as it came.
        hub.append(1, &[at(100, "late\n")]).unwrap();
        assert_eq!(text(&hub), "one\ntwo\nthree\nlate\n");
    }

    /// Two masters on one log (shared storage, etcd): the one deposed while paused in the
    /// middle of a push writes it when it wakes, after the new leader wrote it and more.
    /// Each byte is read once and in its place, the new leader's next write is whole (it
    /// took in the other's record), and so is a third master's view of the log.
    #[test]
    fn a_deposed_masters_late_write_costs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let text = |hub: &OutputHub| {
            let len = *hub.follow(1).unwrap().borrow();
            String::from_utf8(
                hub.read_all(1, len)
                    .unwrap()
                    .into_iter()
                    .flat_map(|c| c.data)
                    .collect(),
            )
            .unwrap()
        };
        let old = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        old.append(1, &[at(0, "0 1\n")]).unwrap();
        // The new leader takes over, and the agent's retried push comes to it.
        let new = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        new.append(1, &[at(4, "0 2\n"), at(8, "0 3\n")]).unwrap();
        // The old one wakes and writes the push it was handling: "0 2" again.
        old.append(1, &[at(4, "0 2\n")]).unwrap();
        // Had it not looked first (paused between its look and its write), the same.
        let mut raw = Vec::new();
        record(&mut raw, 0, v1::Stream::Stdout as u8, Some(4), b"0 2\n");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("1.out"))
            .unwrap()
            .write_all(&raw)
            .unwrap();
        new.append(1, &[at(12, "0 4\n")]).unwrap();
        assert_eq!(text(&new), "0 1\n0 2\n0 3\n0 4\n");
        assert_eq!(new.lost(1, 0, 16, 0).unwrap(), vec![]);
        let third = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        third
            .append(1, &[at(12, "0 4\n"), at(16, "0 5\n")])
            .unwrap();
        assert_eq!(text(&third), "0 1\n0 2\n0 3\n0 4\n0 5\n");
        assert_eq!(third.lost(1, 0, 20, 0).unwrap(), vec![]);
        // Logs written before records said where they start read as they did.
        let mut legacy = Vec::new();
        record(&mut legacy, 0, v1::Stream::Stdout as u8, None, b"a\n");
        record(&mut legacy, 0, v1::Stream::Stdout as u8, None, b"b\n");
        std::fs::write(dir.path().join("2.out"), &legacy).unwrap();
        third.append(2, &[at(2, "b\n"), at(4, "c\n")]).unwrap();
        let len = *third.follow(2).unwrap().borrow();
        let all: Vec<u8> = third
            .read_all(2, len)
            .unwrap()
            .into_iter()
            .flat_map(|c| c.data)
            .collect();
        assert_eq!(all, b"a\nb\nc\n");
    }

    /// Found by fuzzing (`proto_output_batch`): an offset whose end passes u64 overflowed
    /// (a panic in debug builds, which left the job's log lock poisoned for good).
    #[test]
    fn offsets_past_the_end_of_u64_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        hub.append(1, &[at(u64::MAX - 1, "abc")]).unwrap();
        hub.append(
            1,
            &[at(u64::MAX - 5, "ab"), chunk(0, v1::Stream::Stdout, "cd")],
        )
        .unwrap();
        hub.append(1, &[at(0, "one\n")]).unwrap();
        let len = *hub.follow(1).unwrap().borrow();
        let text: Vec<u8> = records(&hub, 1, 0, len)
            .into_iter()
            .flat_map(|c| c.data)
            .collect();
        assert_eq!(
            text, b"abcd",
            "a stream at the end of u64 takes no more offset output"
        );
        // "ab" says where it starts; "cd" does not.
        assert_eq!(len, AT_HEADER as u64 + 2 + HEADER as u64 + 2);
    }

    /// Found by fuzzing (`proto_output_batch`): when no data fit before the notice, an
    /// empty record was written with it and the log passed its cap by a header.
    #[test]
    fn the_notice_alone_is_written_when_no_data_fits() {
        let dir = tempfile::tempdir().unwrap();
        let cap = 183;
        let hub = OutputHub::new(dir.path().to_path_buf(), cap).unwrap();
        let notice = truncation_notice(0, cap).len() as u64;
        // The first chunk leaves exactly room for the notice record, not for another.
        let first = "x".repeat((cap - 2 * HEADER as u64 - notice) as usize);
        hub.append(
            0,
            &[
                chunk(0, v1::Stream::Stdout, &first),
                chunk(0, v1::Stream::Stdout, "y"),
            ],
        )
        .unwrap();
        let len = *hub.follow(0).unwrap().borrow();
        assert_eq!(len, cap, "the data, then the notice, fill the cap exactly");
        let recs = records(&hub, 0, 0, len);
        assert_eq!(recs.len(), 2);
        assert!(String::from_utf8_lossy(&recs[1].data).contains("truncated"));
    }

    #[test]
    fn idle_logs_are_closed_so_descriptors_do_not_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        let followed = hub.follow(0).unwrap();
        for job in 0..3 * MAX_OPEN_LOGS as u64 {
            hub.append(job, &[at(0, "x\n")]).unwrap();
            assert!(hub.open_logs() <= MAX_OPEN_LOGS + 1);
        }
        // The followed log stayed open and still wakes its follower.
        hub.append(0, &[at(2, "y\n")]).unwrap();
        assert_eq!(*followed.borrow(), 2 * (AT_HEADER as u64 + 2));
        // A closed log reopens with what it had: a retried push is still deduplicated.
        hub.append(5, &[at(0, "x\n"), at(2, "z\n")]).unwrap();
        let len = *hub.follow(5).unwrap().borrow();
        let text: Vec<u8> = records(&hub, 5, 0, len)
            .into_iter()
            .flat_map(|c| c.data)
            .collect();
        assert_eq!(text, b"x\nz\n");
    }

    #[test]
    fn appends_are_read_back_in_order_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        let rx = hub.follow(7).unwrap();
        hub.append(
            7,
            &[
                chunk(0, v1::Stream::Stdout, "a"),
                chunk(3, v1::Stream::Stderr, "bc"),
            ],
        )
        .unwrap();
        let len = *rx.borrow();
        let got = records(&hub, 7, 0, len);
        assert_eq!(
            got,
            vec![
                chunk(0, v1::Stream::Stdout, "a"),
                chunk(3, v1::Stream::Stderr, "bc")
            ]
        );
        drop(hub);
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        hub.append(7, &[chunk(1, v1::Stream::Stdout, "d")]).unwrap();
        let len2 = *hub.follow(7).unwrap().borrow();
        assert_eq!(
            records(&hub, 7, len, len2),
            vec![chunk(1, v1::Stream::Stdout, "d")]
        );
    }

    #[test]
    fn output_beyond_the_cap_is_dropped_after_one_notice() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
        let line = "x".repeat(40);
        for _ in 0..10 {
            hub.append(5, &[chunk(1, v1::Stream::Stdout, &line)])
                .unwrap();
        }
        let len = *hub.follow(5).unwrap().borrow();
        assert!(len <= 200, "the log stays under the cap: {len}");
        let recs = records(&hub, 5, 0, len);
        let last = recs.last().unwrap();
        assert_eq!(last.stream, v1::Stream::Stderr as i32);
        assert!(String::from_utf8_lossy(&last.data).contains("truncated"));
        let kept: usize = recs[..recs.len() - 1].iter().map(|r| r.data.len()).sum();
        assert!(kept >= 40, "output up to the cap is kept: {kept}");
        // Reopened (a master restart), it is still full: nothing more, no second notice.
        drop(hub);
        let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
        hub.append(5, &[chunk(1, v1::Stream::Stdout, "more")])
            .unwrap();
        assert_eq!(*hub.follow(5).unwrap().borrow(), len);
    }

    /// What a rank wrote and the log lacks is lost: a gap the agent left (its spool was
    /// full), and what the cap kept out. The master's notice is not the rank's stderr.
    #[test]
    fn losses_are_what_a_rank_wrote_and_the_log_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
        let err = |off, d: &str| v1::Output {
            rank: 2,
            stream: v1::Stream::Stderr as i32,
            data: d.as_bytes().to_vec(),
            offset: Some(off),
        };
        hub.append(9, &[at(0, "abc"), err(0, "e1")]).unwrap();
        hub.append(9, &[at(10, "xyz")]).unwrap(); // bytes 3..10 never came
        assert_eq!(hub.lost(9, 0, 13, 0).unwrap(), vec![(OutStream::Stdout, 7)]);
        assert_eq!(hub.lost(9, 2, 0, 2).unwrap(), vec![]);
        // Past the cap: kept out, counted; the notice is not rank 2's stderr.
        hub.append(9, &[err(2, &"z".repeat(300))]).unwrap();
        let lost = hub.lost(9, 2, 0, 302).unwrap();
        assert_eq!(lost.len(), 1);
        assert!(lost[0].1 > 100, "{lost:?}");
        // The same after a restart (the counts come back from the log).
        drop(hub);
        let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
        assert_eq!(hub.lost(9, 2, 0, 302).unwrap(), lost);
        assert_eq!(hub.lost(9, 0, 13, 0).unwrap(), vec![(OutStream::Stdout, 7)]);
    }

    /// A reader far behind gets the log a bounded piece at a time, records larger than the
    /// bound in several pieces, and the pieces put together are the log.
    #[test]
    fn reads_are_bounded_and_pieces_make_up_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
        let piece = "p".repeat(30 * 1024);
        for i in 0..10u64 {
            hub.append(4, &[at(i * piece.len() as u64, &piece)])
                .unwrap();
        }
        let big = "b".repeat(3 * READ_MAX as usize + 5);
        hub.append(4, &[chunk(1, v1::Stream::Stderr, &big)])
            .unwrap();
        let len = *hub.follow(4).unwrap().borrow();
        let (mut at, mut reads) = (Cursor::default(), 0);
        // What each rank's stream got, put together.
        let mut got: HashMap<(u32, i32), Vec<u8>> = HashMap::new();
        while at.record < len {
            let before = at.position();
            let chunks = hub.read(4, &mut at, len, READ_MAX).unwrap();
            let bytes: usize = chunks.iter().map(|c| c.data.len()).sum();
            assert!(bytes as u64 <= READ_MAX, "{bytes} bytes in one read");
            assert_ne!(at.position(), before, "every read moves on");
            for c in chunks {
                got.entry((c.rank, c.stream)).or_default().extend(c.data);
            }
            reads += 1;
        }
        assert_eq!(at.position(), (len, 0));
        assert!(reads >= 8, "{reads} reads");
        let out = &got[&(0, v1::Stream::Stdout as i32)];
        assert_eq!(out, piece.repeat(10).as_bytes());
        let err = &got[&(1, v1::Stream::Stderr as i32)];
        assert_eq!(err, big.as_bytes(), "the big record, whole again");
    }
}
