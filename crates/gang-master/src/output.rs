//! Job output: every chunk an agent pushes is appended to a per-job log file in the state
//! directory, and readers are told the new length. An attached client reads the log from
//! the start and then follows it, so output produced before it attached, or before a
//! master restart, is never missing, and a slow client can never make a fast job wait.
//!
//! Record format: rank (u32 LE), stream (u8), length (u32 LE), data.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gang_proto::v1;
use tokio::sync::watch;

struct JobLog {
    file: File,
    len: u64,
    notify: watch::Sender<u64>,
}

pub struct OutputHub {
    dir: PathBuf,
    logs: Mutex<HashMap<u64, Arc<Mutex<JobLog>>>>,
}

const HEADER: usize = 9;

impl OutputHub {
    pub fn new(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(OutputHub {
            dir,
            logs: Mutex::new(HashMap::new()),
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
            .open(self.dir.join(format!("{job}.out")))?;
        let len = file.metadata()?.len();
        let (notify, _) = watch::channel(len);
        let l = Arc::new(Mutex::new(JobLog { file, len, notify }));
        logs.insert(job, l.clone());
        Ok(l)
    }

    /// Append chunks for `job` and wake its readers.
    pub fn append(&self, job: u64, chunks: &[v1::Output]) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(chunks.iter().map(|c| c.data.len() + HEADER).sum());
        for c in chunks.iter().filter(|c| !c.data.is_empty()) {
            buf.extend_from_slice(&c.rank.to_le_bytes());
            buf.push(c.stream as u8);
            buf.extend_from_slice(&(c.data.len() as u32).to_le_bytes());
            buf.extend_from_slice(&c.data);
        }
        let log = self.log(job)?;
        let mut l = log.lock().expect("job log lock");
        l.file.write_all(&buf)?;
        l.len += buf.len() as u64;
        let len = l.len;
        l.notify.send_replace(len);
        Ok(())
    }

    /// Follow `job`'s log: a receiver of its length as it grows.
    pub fn follow(&self, job: u64) -> std::io::Result<watch::Receiver<u64>> {
        let log = self.log(job)?;
        let l = log.lock().expect("job log lock");
        Ok(l.notify.subscribe())
    }

    /// The records in `[from, to)` of `job`'s log (offsets on record boundaries).
    pub fn read(&self, job: u64, from: u64, to: u64) -> std::io::Result<Vec<v1::Output>> {
        if to <= from {
            return Ok(vec![]);
        }
        let log = self.log(job)?;
        let mut buf = vec![0u8; (to - from) as usize];
        log.lock()
            .expect("job log lock")
            .file
            .read_exact_at(&mut buf, from)?;
        let mut out = vec![];
        let mut i = 0;
        while i + HEADER <= buf.len() {
            let rank = u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
            let stream = buf[i + 4] as i32;
            let n = u32::from_le_bytes(buf[i + 5..i + 9].try_into().expect("4 bytes")) as usize;
            let data = buf[i + HEADER..(i + HEADER + n).min(buf.len())].to_vec();
            i += HEADER + n;
            out.push(v1::Output { rank, stream, data });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(rank: u32, stream: v1::Stream, data: &str) -> v1::Output {
        v1::Output {
            rank,
            stream: stream as i32,
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn appends_are_read_back_in_order_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let hub = OutputHub::new(dir.path().to_path_buf()).unwrap();
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
        let got = hub.read(7, 0, len).unwrap();
        assert_eq!(
            got,
            vec![
                chunk(0, v1::Stream::Stdout, "a"),
                chunk(3, v1::Stream::Stderr, "bc")
            ]
        );
        drop(hub);
        let hub = OutputHub::new(dir.path().to_path_buf()).unwrap();
        hub.append(7, &[chunk(1, v1::Stream::Stdout, "d")]).unwrap();
        let len2 = *hub.follow(7).unwrap().borrow();
        assert_eq!(
            hub.read(7, len, len2).unwrap(),
            vec![chunk(1, v1::Stream::Stdout, "d")]
        );
    }
}
