//! Finished jobs moved out of their own keys in etcd: every run of `ARCHIVE_CHUNK`
//! consecutive job ids that have all ended is packed into one key (`archive/FIRST`, the
//! rows' JSON lines, deflated), so that the store holds a cluster's history in a few
//! large values rather than millions of small keys (etcd keeps every key's index in
//! memory, and its database grows with their count).
//!
//! Pure: which runs to pack, and the packing; `persistence/etcd.rs` reads and writes.

use std::collections::BTreeSet;
use std::io::{Read, Write};

use crate::job::SavedJob;

/// Jobs per archive key.
pub const ARCHIVE_CHUNK: u64 = 1000;

/// The first run of `chunk` consecutive ids among `finished` (each one's row still in a
/// key of its own): `(first, end)`, ids `first..end`.
pub fn next_run(finished: &BTreeSet<u64>, chunk: u64) -> Option<(u64, u64)> {
    let mut start = None;
    let mut prev = 0;
    for &id in finished {
        match start {
            Some(s) if id == prev + 1 => {
                if id + 1 - s == chunk {
                    return Some((s, id + 1));
                }
            }
            _ => {
                if chunk == 1 {
                    return Some((id, id + 1));
                }
                start = Some(id);
            }
        }
        prev = id;
    }
    None
}

/// Rows (each a job's JSON) as one deflated value, a row a line.
pub fn pack(rows: &[Vec<u8>]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    for r in rows {
        z.write_all(r)?;
        z.write_all(b"\n")?;
    }
    z.finish()
}

/// The jobs of an archive value.
pub fn unpack(value: &[u8]) -> anyhow::Result<Vec<SavedJob>> {
    let mut text = String::new();
    flate2::read::DeflateDecoder::new(value).read_to_string(&mut text)?;
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_consecutive_finished_ids_a_chunk_long() {
        let set = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(next_run(&set(&[1, 2, 3, 5, 6, 7, 8]), 4), Some((5, 9)));
        assert_eq!(next_run(&set(&[1, 2, 3, 5, 6, 7]), 4), None);
        assert_eq!(next_run(&set(&[]), 4), None);
        let many: BTreeSet<u64> = (10..2500).collect();
        assert_eq!(next_run(&many, 1000), Some((10, 1010)));
    }

    #[test]
    fn packed_rows_come_back() {
        let row = r#"{"id":7,"user":"u","uid":1,"gid":1,"groups":[1],"name":"x","argv":["x"],"cwd":"/","env":{},"time_limit_s":0,"stdin":false,"shape":"1x1","w":1,"h":1,"state":"completed","submesh":{"x":0,"y":0,"w":1,"h":1},"exit_code":0,"reason":"","submit_ns":1,"start_ns":2,"end_ns":3,"gang":"stop","on_deadlock":"report","msg_context":"resident","mpi":"pmi1","mpi_check":false,"run_ns":0}"#;
        let rows: Vec<Vec<u8>> = (0..100).map(|_| row.as_bytes().to_vec()).collect();
        let packed = pack(&rows).unwrap();
        assert!(
            packed.len() * 10 < rows.len() * row.len(),
            "{}",
            packed.len()
        );
        let jobs = unpack(&packed).unwrap();
        assert_eq!(jobs.len(), 100);
        assert_eq!(jobs[0].id.0, 7);
    }
}
