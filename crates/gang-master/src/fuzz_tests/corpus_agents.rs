//! The seeds of the agent service's targets (`proto_register`, `proto_heartbeat`,
//! `proto_rank_exit`, `proto_fence`, `proto_output_batch`, `proto_switch_report`,
//! `proto_clock_probe`): valid encodings, a few of each kind.

use gang_proto::v1;

use super::corpus::seeds;

pub(super) fn agent_seeds() {
    let refs = |rs: &[(u64, u32)]| -> Vec<v1::RankRef> {
        rs.iter()
            .map(|&(job_id, rank)| v1::RankRef { job_id, rank })
            .collect()
    };
    let register = |x, y, running: &[(u64, u32)]| v1::RegisterRequest {
        x,
        y,
        address: format!("agent-{x}-{y}:1"),
        running: refs(running),
    };
    seeds(
        "proto_register",
        vec![
            ("fresh", register(0, 0, &[])),
            ("running", register(0, 0, &[(1, 0), (2, 0)])),
            ("stale", register(3, 3, &[(2, 15), (99, 0), (3, 0)])),
            ("off-mesh", register(4, 0, &[])),
            (
                "no-address",
                v1::RegisterRequest {
                    address: String::new(),
                    ..register(1, 1, &[(2, 5)])
                },
            ),
        ],
    );
    let activity =
        |job_id, rank, blocked_since_ns, source, tag, posted, delivered| v1::RankActivity {
            job_id,
            rank,
            blocked_since_ns,
            source,
            tag,
            posted,
            delivered,
        };
    let heartbeat = |x, y, running: &[(u64, u32)]| v1::HeartbeatRequest {
        x,
        y,
        running: refs(running),
        clock_offset_ns: -1_500,
        clock_error_ns: 20_000,
        clock_from_host: false,
        table_version: 1,
        activity: vec![],
    };
    seeds(
        "proto_heartbeat",
        vec![
            ("steady", heartbeat(0, 0, &[(1, 0), (2, 0)])),
            (
                "host-clock",
                v1::HeartbeatRequest {
                    clock_from_host: true,
                    clock_offset_ns: 0,
                    clock_error_ns: 0,
                    ..heartbeat(2, 1, &[(2, 6)])
                },
            ),
            (
                "clock-extremes",
                v1::HeartbeatRequest {
                    clock_offset_ns: i64::MIN,
                    clock_error_ns: i64::MAX,
                    table_version: u64::MAX,
                    ..heartbeat(1, 0, &[])
                },
            ),
            ("stray", heartbeat(3, 3, &[(99, 0), (3, 0)])),
            ("off-mesh", heartbeat(0, 7, &[])),
            (
                "activity",
                v1::HeartbeatRequest {
                    activity: vec![
                        // A rank of job 1 blocked in a receive, as its node reports it.
                        activity(1, 0, 1_700_000_000_000_000_000, -1, 5, 10, 9),
                        // Ranks of another node, of an unknown job, past the job's size.
                        activity(1, 3, 1, 0, 0, 1, 1),
                        activity(99, 0, 0, 0, 0, 0, 0),
                        activity(2, 400, i64::MIN, i32::MIN, i32::MAX, u64::MAX, 0),
                    ],
                    ..heartbeat(0, 0, &[(1, 0)])
                },
            ),
        ],
    );
    let fence = |x, y, job_id, rank, epoch, puts: &[(&str, &str)]| v1::FenceRequest {
        x,
        y,
        job_id,
        rank,
        epoch,
        puts: puts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        known_epoch: epoch.saturating_sub(1),
        wait_ms: 0,
    };
    seeds(
        "proto_fence",
        vec![
            ("first", fence(0, 0, 1, 0, 1, &[("ep-0", "10.0.0.1:5000")])),
            ("other-node", fence(3, 3, 1, 0, 1, &[])),
            ("rank-past-size", fence(0, 0, 1, 9, 1, &[])),
            ("unknown-job", fence(0, 0, 99, 0, 1, &[])),
            ("queued-job", fence(0, 0, 4, 0, 1, &[])),
            ("epoch-max", fence(0, 0, 3, 0, u32::MAX, &[("k", "v")])),
            ("epoch-zero", fence(0, 0, 1, 0, 0, &[("", "")])),
            ("off-mesh", fence(9, 0, 1, 0, 1, &[])),
        ],
    );
    use v1::rank_exit::How;
    let exit = |job_id, rank, x, y, how| v1::RankExit {
        job_id,
        rank,
        x,
        y,
        how,
        ..Default::default()
    };
    seeds(
        "proto_rank_exit",
        vec![
            ("completed", exit(1, 0, 0, 0, Some(How::Code(0)))),
            ("failed", exit(2, 5, 1, 1, Some(How::Code(1)))),
            ("killed", exit(2, 0, 0, 0, Some(How::Signal(9)))),
            (
                "not-started",
                exit(
                    3,
                    0,
                    2,
                    0,
                    Some(How::Error(
                        "node (2,0): cannot exec ./a.out: No such file".into(),
                    )),
                ),
            ),
            ("unknown-how", exit(1, 3, 1, 1, None)),
            ("unknown-job", exit(99, 0, 0, 0, Some(How::Code(0)))),
            ("rank-past-end", exit(1, 4, 0, 0, Some(How::Code(0)))),
            ("signal-max", exit(2, 1, 1, 0, Some(How::Signal(i32::MAX)))),
        ],
    );
    let chunk = |rank, stream: v1::Stream, data: &[u8], offset| v1::Output {
        rank,
        stream: stream as i32,
        data: data.to_vec(),
        offset,
    };
    let batch = |chunks| v1::OutputBatch { job_id: 1, chunks };
    use v1::Stream::{Stderr, Stdout};
    seeds(
        "proto_output_batch",
        vec![
            ("first", batch(vec![chunk(0, Stdout, b"hello\n", Some(0))])),
            (
                "both-streams",
                batch(vec![
                    chunk(0, Stdout, b"step 1\n", Some(0)),
                    chunk(1, Stderr, b"warning: slow\n", Some(0)),
                ]),
            ),
            (
                "no-offset",
                batch(vec![chunk(2, Stdout, b"legacy agent\n", None)]),
            ),
            (
                "retried",
                batch(vec![
                    chunk(0, Stdout, b"hello\n", Some(0)),
                    chunk(0, Stdout, b"llo\nworld\n", Some(3)),
                ]),
            ),
            (
                "gap",
                batch(vec![chunk(0, Stdout, b"after a drop\n", Some(100))]),
            ),
            ("empty", batch(vec![chunk(0, Stdout, b"", Some(0))])),
            (
                "large",
                batch(vec![chunk(3, Stdout, &[b'x'; 4096], Some(0))]),
            ),
            (
                "unknown-stream",
                batch(vec![chunk(0, v1::Stream::Unspecified, b"?", None)]),
            ),
            ("no-chunks", batch(vec![])),
        ],
    );
    let now = 1_700_000_000_000_000_000i64;
    let record = |slot: i64, lateness: i64, cost: i64| v1::SwitchRecord {
        table_version: 3,
        slot,
        deadline_ns: now + slot * 10_000_000,
        first_signal_ns: now + slot * 10_000_000 + lateness,
        last_signal_ns: now + slot * 10_000_000 + lateness + cost,
        actions: 2,
        clock_error_ns: 15_000,
    };
    seeds(
        "proto_switch_report",
        vec![
            (
                "batch",
                v1::SwitchReport {
                    x: 1,
                    y: 2,
                    records: vec![record(1, 40_000, 5_000), record(2, 35_000, 4_000)],
                    dropped: 0,
                    msg_flushed: 0,
                    msg_unflushed: 0,
                },
            ),
            (
                "dropped",
                v1::SwitchReport {
                    x: 0,
                    y: 0,
                    records: vec![],
                    dropped: 17,
                    msg_flushed: 0,
                    msg_unflushed: 0,
                },
            ),
            (
                "early",
                v1::SwitchReport {
                    x: 3,
                    y: 3,
                    records: vec![record(5, -20_000, 1_000)],
                    dropped: 0,
                    msg_flushed: 0,
                    msg_unflushed: 0,
                },
            ),
        ],
    );
    seeds(
        "proto_clock_probe",
        [
            ("now", now),
            ("zero", 0),
            ("negative", -1),
            ("min", i64::MIN),
            ("max", i64::MAX),
        ]
        .iter()
        .map(|&(n, t1_ns)| (n, v1::ClockProbeRequest { t1_ns }))
        .collect(),
    );
}
