//! The log's records, and reading them: what of each is new to whoever reads it.
//!
//! Record format: rank (u32 LE), stream (u8), length (u32 LE), then, when the stream
//! byte has `AT` set, where the data starts in the rank's stream (u64 LE), then the data.
//! The master's own notices (a log at its cap) are records of stream `NOTICE`, read out as
//! stderr: what a rank wrote is told apart from them, so the log knows how much of each
//! stream it holds.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use gang_proto::v1;

pub(super) const HEADER: usize = 9;
/// A record whose data says where it starts: `HEADER` and the offset.
pub(super) const AT_HEADER: usize = HEADER + 8;
/// The stream byte of the master's own notices.
pub(super) const NOTICE: u8 = 255;
/// Set in the stream byte of a record that carries its offset.
pub(super) const AT: u8 = 0x80;
/// The most records a reader gets at once: many tiny records must not cost more in
/// `Output` messages than `READ_MAX` of data does.
pub(super) const READ_RECORDS: usize = 256;

/// How far each (rank, stream) has come, record after record: what of a record is new.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Coverage(HashMap<(u32, i32), u64>);

impl Coverage {
    /// The part of `len` bytes starting at `at` (None: right after what came before) of
    /// `rank`'s `stream` that is new, as an offset into them (`len` when none is); taken.
    /// Bytes past the end so far (a gap: output the agent had to drop) are new.
    pub(super) fn fresh(&mut self, rank: u32, stream: i32, at: Option<u64>, len: u64) -> u64 {
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
    pub(super) fn take(&mut self, r: &RecordHead) -> u64 {
        if r.stream == NOTICE {
            0
        } else {
            self.fresh(r.rank, i32::from(r.stream), r.at, r.len)
        }
    }
}

/// Where a reader is in a log: the record it is in (its offset), how many bytes of that
/// record's data it has had already (or skipped: had from an earlier record), and how far
/// each stream has come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub record: u64,
    pub taken: u64,
    pub(super) seen: Coverage,
}

impl Cursor {
    /// Where it is, to tell whether a read moved on.
    pub fn position(&self) -> (u64, u64) {
        (self.record, self.taken)
    }
}

/// starts in the stream if it says, and where the data and the record end in the log.
pub(super) struct RecordHead {
    pub(super) rank: u32,
    pub(super) stream: u8,
    pub(super) len: u64,
    pub(super) at: Option<u64>,
    pub(super) data: u64,
    pub(super) end: u64,
}

/// The header of the record at `at`, if the whole record lies before `to`.
pub(super) fn head(file: &File, at: u64, to: u64) -> std::io::Result<Option<RecordHead>> {
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
pub(super) fn scan_records(file: &File, from: u64, to: u64) -> std::io::Result<Vec<RecordHead>> {
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
pub(super) fn read_records(
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

pub(super) fn record(buf: &mut Vec<u8>, rank: u32, stream: u8, at: Option<u64>, data: &[u8]) {
    buf.extend_from_slice(&rank.to_le_bytes());
    buf.push(if at.is_some() { stream | AT } else { stream });
    buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
    if let Some(off) = at {
        buf.extend_from_slice(&off.to_le_bytes());
    }
    buf.extend_from_slice(data);
}
