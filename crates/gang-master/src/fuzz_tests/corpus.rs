//! The seeds of the master's targets: valid encodings of every request its services
//! decode, a few of each kind (accepted, refused, at the edges of its fields). Regenerate
//! with `cargo test -p gang-master --lib write_fuzz_corpus -- --ignored`.

use gang_proto::v1;
use prost::Message;

pub(super) fn seeds<M: Message>(target: &str, named: Vec<(&str, M)>) {
    let seeds: Vec<(String, Vec<u8>)> = named
        .into_iter()
        .map(|(name, m)| (format!("{name}.bin"), m.encode_to_vec()))
        .collect();
    gang_fuzz::write_seeds(target, &seeds);
}

fn spec(shape: &str, argv: &[&str]) -> v1::JobSpec {
    v1::JobSpec {
        shape: shape.into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: "/tmp".into(),
        ..Default::default()
    }
}

fn submit(spec: v1::JobSpec) -> v1::SubmitRequest {
    v1::SubmitRequest {
        spec: Some(spec),
        ..Default::default()
    }
}

pub(super) fn submit_seeds() {
    let env = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let full = v1::JobSpec {
        shape: "2x2".into(),
        argv: vec!["./a.out".into(), "-n".into(), "3".into()],
        cwd: "/home/u1000/run".into(),
        env: env(&[
            ("PATH", "/usr/bin"),
            ("GANG_MASTER", "unix:/run/gang/master.sock"),
        ]),
        time_limit_s: 60,
        stdin: false,
        name: "solver".into(),
        gang: v1::GangMode::Priority as i32,
        on_deadlock: v1::DeadlockPolicy::Kill as i32,
        msg_context: v1::MsgContext::SaveRestore as i32,
        mpi: v1::Mpi::None as i32,
        mpi_check: true,
        output: "out/%j-%r.log".into(),
        error: String::new(),
        dependency: String::new(),
        hold: false,
        array: String::new(),
        allocation: 0,
        allocate: false,
        script: String::new(),
        script_at: 0,
        pty: 0,
    };
    seeds(
        "proto_submit",
        vec![
            ("full", submit(full.clone())),
            (
                "stated-self",
                v1::SubmitRequest {
                    spec: Some(full.clone()),
                    uid: 1000,
                    gid: 1000,
                    user: "u1000".into(),
                    client_token: "retry-1".into(),
                },
            ),
            (
                "stated-other",
                v1::SubmitRequest {
                    spec: Some(full),
                    uid: 1001,
                    gid: 27,
                    user: "mallory".into(),
                    client_token: String::new(),
                },
            ),
            (
                "count-stdin",
                submit(v1::JobSpec {
                    stdin: true,
                    gang: v1::GangMode::Stop as i32,
                    ..spec("3", &["cat"])
                }),
            ),
            (
                "freeze-whole-mesh",
                submit(v1::JobSpec {
                    gang: v1::GangMode::Freeze as i32,
                    time_limit_s: 3600,
                    ..spec("4x4", &["./sim"])
                }),
            ),
            ("line", submit(spec("4x1", &["hostname"]))),
            ("no-spec", v1::SubmitRequest::default()),
            ("empty-argv", submit(spec("1x1", &[]))),
            (
                "relative-cwd",
                submit(v1::JobSpec {
                    cwd: "work".into(),
                    ..spec("1", &["ls"])
                }),
            ),
            ("nul-argument", submit(spec("1x1", &["a\0b"]))),
            (
                "bad-env",
                submit(v1::JobSpec {
                    env: env(&[("A=B", "1"), ("", "x")]),
                    ..spec("1x1", &["env"])
                }),
            ),
            (
                "unknown-gang",
                submit(v1::JobSpec {
                    gang: 9,
                    ..spec("1x1", &["true"])
                }),
            ),
            ("too-large", submit(spec("5x5", &["true"]))),
            ("too-many-nodes", submit(spec("16", &["true"]))),
            ("zero-side", submit(spec("0x2", &["true"]))),
            ("long-argv", submit(spec("1x1", &[&"x".repeat(5000)]))),
            (
                "huge-time-limit",
                submit(v1::JobSpec {
                    time_limit_s: u64::MAX,
                    ..spec("1x1", &["sleep", "inf"])
                }),
            ),
        ],
    );
}

pub(super) fn client_seeds() {
    seeds(
        "proto_cancel",
        vec![
            ("own", v1::CancelRequest { job_id: 1, uid: 0 }),
            (
                "own-stated",
                v1::CancelRequest {
                    job_id: 4,
                    uid: 1000,
                },
            ),
            ("queued", v1::CancelRequest { job_id: 4, uid: 0 }),
            (
                "other-stated",
                v1::CancelRequest {
                    job_id: 1,
                    uid: 1001,
                },
            ),
            ("unknown", v1::CancelRequest { job_id: 99, uid: 0 }),
            ("zero", v1::CancelRequest::default()),
            (
                "max",
                v1::CancelRequest {
                    job_id: u64::MAX,
                    uid: u32::MAX,
                },
            ),
        ],
    );
    let ids = [
        ("first", 1),
        ("queued", 4),
        ("zero", 0),
        ("unknown", 99),
        ("max", u64::MAX),
    ];
    seeds(
        "proto_get_job",
        ids.iter()
            .map(|&(n, job_id)| (n, v1::GetJobRequest { job_id }))
            .collect(),
    );
    seeds(
        "proto_watch",
        ids.iter()
            .map(|&(n, job_id)| (n, v1::WatchRequest { job_id }))
            .collect(),
    );
    seeds(
        "proto_attach",
        vec![
            (
                "name",
                v1::AttachRequest {
                    job_id: 1,
                    ..Default::default()
                },
            ),
            (
                "stdin",
                v1::AttachRequest {
                    job_id: 1,
                    stdin: b"hello\n".to_vec(),
                    stdin_eof: false,
                    no_follow: false,
                },
            ),
            (
                "eof",
                v1::AttachRequest {
                    job_id: 3,
                    stdin: vec![],
                    stdin_eof: true,
                    no_follow: false,
                },
            ),
            (
                "binary",
                v1::AttachRequest {
                    job_id: 2,
                    stdin: (0..=255).collect(),
                    stdin_eof: true,
                    no_follow: false,
                },
            ),
            (
                "unknown",
                v1::AttachRequest {
                    job_id: 99,
                    ..Default::default()
                },
            ),
        ],
    );
    let all: Vec<i32> = (1..=6).collect();
    seeds(
        "proto_list_jobs",
        vec![
            ("everything", v1::ListJobsRequest::default()),
            (
                "queued",
                v1::ListJobsRequest {
                    states: vec![1],
                    limit: 0,
                    before_id: 0,
                },
            ),
            (
                "live-two",
                v1::ListJobsRequest {
                    states: vec![3, 1, 2],
                    limit: 2,
                    before_id: 0,
                },
            ),
            (
                "all-states",
                v1::ListJobsRequest {
                    states: all,
                    limit: 1,
                    before_id: 0,
                },
            ),
            (
                "unspecified",
                v1::ListJobsRequest {
                    states: vec![0],
                    limit: 0,
                    before_id: 0,
                },
            ),
            (
                "unknown-state",
                v1::ListJobsRequest {
                    states: vec![7],
                    limit: 0,
                    before_id: 0,
                },
            ),
            (
                "next-page",
                v1::ListJobsRequest {
                    states: vec![],
                    limit: 2,
                    before_id: 3,
                },
            ),
            (
                "max-limit",
                v1::ListJobsRequest {
                    states: vec![],
                    limit: u32::MAX,
                    before_id: 0,
                },
            ),
        ],
    );
    seeds(
        "proto_node",
        vec![
            ("origin", v1::NodeRequest { x: 0, y: 0 }),
            ("corner", v1::NodeRequest { x: 3, y: 3 }),
            ("off-x", v1::NodeRequest { x: 4, y: 0 }),
            ("off-y", v1::NodeRequest { x: 0, y: 4 }),
            ("max", v1::NodeRequest { x: u32::MAX, y: 1 }),
        ],
    );
    seeds(
        "proto_issue_token",
        [
            ("default", 0),
            ("minute", 60),
            ("hour", 3600),
            ("week", 7 * 86400),
            ("over-week", 7 * 86400 + 1),
            ("max", u64::MAX),
        ]
        .iter()
        .map(|&(n, ttl_s)| (n, v1::IssueTokenRequest { ttl_s }))
        .collect(),
    );
}

/// Every seed decodes as its target's message: a seed that no longer does (the message
/// changed) would leave its target mutating noise. Regression seeds included: each was a
/// message that reached the code it broke.
#[test]
fn seeds_decode() {
    fn all<M: Message + Default>(target: &str) {
        for (i, seed) in gang_fuzz::seeds(target).iter().enumerate() {
            if let Err(e) = M::decode(&seed[..]) {
                panic!("seed {i} of {target} does not decode: {e}");
            }
        }
    }
    all::<v1::SubmitRequest>("proto_submit");
    all::<v1::CancelRequest>("proto_cancel");
    all::<v1::GetJobRequest>("proto_get_job");
    all::<v1::ListJobsRequest>("proto_list_jobs");
    all::<v1::WatchRequest>("proto_watch");
    all::<v1::AttachRequest>("proto_attach");
    all::<v1::NodeRequest>("proto_node");
    all::<v1::IssueTokenRequest>("proto_issue_token");
    all::<v1::RegisterRequest>("proto_register");
    all::<v1::HeartbeatRequest>("proto_heartbeat");
    all::<v1::RankExit>("proto_rank_exit");
    all::<v1::FenceRequest>("proto_fence");
    all::<v1::OutputBatch>("proto_output_batch");
    all::<v1::SwitchReport>("proto_switch_report");
    all::<v1::ClockProbeRequest>("proto_clock_probe");
}
