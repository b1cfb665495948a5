//! Targets of the output log as agents fill it: `proto_output_batch` (whole records,
//! caps, restarts) and `output_retries` (retried pushes kept exactly once).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gang_proto::v1;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use super::{decode, encoded, reply};
use crate::output::OutputHub;

// ------------------------------------------------------------------ OutputBatch: the log

fn output_chunk() -> impl Strategy<Value = v1::Output> {
    (
        prop_oneof![4 => 0u32..4, 1 => any::<u32>()],
        prop_oneof![4 => 0i32..=2, 1 => any::<i32>()],
        vec(any::<u8>(), 0..300),
        prop::option::weighted(
            0.7,
            prop_oneof![
                4 => 0u64..600,
                1 => (0u64..1000).prop_map(|d| u64::MAX - d),
                1 => any::<u64>(),
            ],
        ),
    )
        .prop_map(|(rank, stream, data, offset)| v1::Output {
            rank,
            stream,
            data,
            offset,
        })
}

fn output_batch() -> impl Strategy<Value = v1::OutputBatch> {
    (
        prop_oneof![4 => 0u64..3, 1 => any::<u64>()],
        vec(output_chunk(), 0..5),
    )
        .prop_map(|(job_id, chunks)| v1::OutputBatch { job_id, chunks })
}

/// A job's log as the master serves it: whole records only, within the cap, the length
/// readers are told equal to the file's.
fn log_is_whole(hub: &OutputHub, dir: &Path, job: u64, cap: u64) -> Result<u64, TestCaseError> {
    let len = *hub.follow(job).expect("the log opens").borrow();
    prop_assert!(
        len <= cap,
        "job {job}'s log is {len} bytes, over its cap of {cap}"
    );
    let on_disk = std::fs::metadata(dir.join(format!("{job}.out"))).map_or(0, |m| m.len());
    prop_assert_eq!(on_disk, len);
    let bytes: u64 = hub
        .record_sizes(job, len)
        .expect("the log scans")
        .iter()
        .sum();
    prop_assert_eq!(bytes, len, "the log is not a sequence of whole records");
    hub.read_all(job, len).expect("the log reads back");
    Ok(len)
}

#[derive(Debug, Clone)]
enum LogOp {
    Push(Vec<u8>),
    /// The master restarts: the hub is opened again on the same directory.
    Reopen,
}

#[test]
fn fuzz_proto_output_batch() {
    let ops = vec(
        prop_oneof![
            6 => encoded("proto_output_batch", output_batch()).prop_map(LogOp::Push),
            1 => Just(LogOp::Reopen),
        ],
        1..=6,
    );
    let cap = prop_oneof![Just(0u64), 1u64..200, 200u64..5000, Just(u64::MAX)];
    gang_fuzz::run("proto_output_batch", 400, (cap, ops), |(cap, ops)| {
        let dir = gang_fuzz::scratch_dir();
        let mut hub = OutputHub::new(dir.path().to_path_buf(), cap).expect("the hub opens");
        let mut lens: BTreeMap<u64, u64> = BTreeMap::new();
        for op in &ops {
            match op {
                LogOp::Push(bytes) => {
                    let Some(batch) = decode::<v1::OutputBatch>(bytes)? else {
                        continue;
                    };
                    hub.append(batch.job_id, &batch.chunks)
                        .map_err(|e| TestCaseError::fail(format!("append failed: {e}")))?;
                    let len = log_is_whole(&hub, dir.path(), batch.job_id, cap)?;
                    let before = lens.insert(batch.job_id, len).unwrap_or(0);
                    prop_assert!(len >= before, "job {}'s log shrank", batch.job_id);
                    reply(&v1::OutputAck {})?;
                }
                LogOp::Reopen => {
                    drop(hub);
                    hub = OutputHub::new(dir.path().to_path_buf(), cap).expect("the hub reopens");
                    for (&job, &len) in &lens {
                        prop_assert_eq!(log_is_whole(&hub, dir.path(), job, cap)?, len);
                    }
                }
            }
        }
        Ok(ops.len() as u64)
    });
}

/// One push of an agent that retries: a window of one stream's true bytes, starting at or
/// before what the master has (so no gap), or the master restarting.
#[derive(Debug, Clone)]
enum Retry {
    Push {
        rank: u32,
        stderr: bool,
        from: Index,
        len: u16,
    },
    Reopen,
    /// The next pushes go to the other master, which has the log open too (a failover
    /// with the logs on shared storage; the one left behind may write late).
    Switch,
}

/// Byte `i` of a stream: every window of it is known, so a duplicate shows.
fn true_byte(rank: u32, stderr: bool, i: u64) -> u8 {
    (i.wrapping_mul(31) ^ (u64::from(rank) * 7) ^ u64::from(stderr)) as u8
}

/// Agents retry pushes whose acknowledgment was lost, overlapping what the master has, and
/// two masters write one log: it must read as each stream's bytes exactly once, in order,
/// across restarts.
#[test]
fn fuzz_output_retries() {
    let op = prop_oneof![
        8 => (0u32..3, any::<bool>(), any::<Index>(), 1u16..200)
            .prop_map(|(rank, stderr, from, len)| Retry::Push { rank, stderr, from, len }),
        1 => Just(Retry::Reopen),
        1 => Just(Retry::Switch),
    ];
    gang_fuzz::run("output_retries", 300, vec(op, 1..=12), |ops| {
        let dir = gang_fuzz::scratch_dir();
        let mut hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).expect("the hub opens");
        let mut other = OutputHub::new(dir.path().to_path_buf(), u64::MAX).expect("opens");
        let mut ends: BTreeMap<(u32, bool), u64> = BTreeMap::new();
        for op in &ops {
            match op {
                Retry::Push {
                    rank,
                    stderr,
                    from,
                    len,
                } => {
                    let end = ends.entry((*rank, *stderr)).or_default();
                    let off = from.index(*end as usize + 1) as u64;
                    let data = (off..off + u64::from(*len))
                        .map(|i| true_byte(*rank, *stderr, i))
                        .collect();
                    let stream = if *stderr {
                        v1::Stream::Stderr
                    } else {
                        v1::Stream::Stdout
                    };
                    let chunk = v1::Output {
                        rank: *rank,
                        stream: stream as i32,
                        data,
                        offset: Some(off),
                    };
                    hub.append(7, &[chunk]).expect("append");
                    *end = (*end).max(off + u64::from(*len));
                }
                Retry::Reopen => {
                    drop(hub);
                    hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).expect("reopens");
                }
                Retry::Switch => std::mem::swap(&mut hub, &mut other),
            }
        }
        // The reading master takes in what the other wrote last.
        hub.append(7, &[]).expect("append");
        let len = log_is_whole(&hub, dir.path(), 7, u64::MAX)?;
        let mut logged: BTreeMap<(u32, bool), Vec<u8>> = BTreeMap::new();
        for r in hub.read_all(7, len).expect("reads back") {
            let stderr = r.stream == v1::Stream::Stderr as i32;
            logged.entry((r.rank, stderr)).or_default().extend(r.data);
        }
        let streams: BTreeSet<_> = ends.keys().chain(logged.keys()).copied().collect();
        for (rank, stderr) in streams {
            let end = ends.get(&(rank, stderr)).copied().unwrap_or(0);
            let want: Vec<u8> = (0..end).map(|i| true_byte(rank, stderr, i)).collect();
            let got = logged.remove(&(rank, stderr)).unwrap_or_default();
            prop_assert!(
                got == want,
                "rank {rank} stderr {stderr}: {} bytes logged, {} sent",
                got.len(),
                want.len()
            );
        }
        Ok(ops.len() as u64)
    });
}
