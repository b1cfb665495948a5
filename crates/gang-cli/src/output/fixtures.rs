//! Proto values the output tests share: jobs in several states, nodes of every kind, a
//! matrix and switching statistics.

use gang_proto::v1::{
    Deadlock, DeadlockPolicy, GangMode, JobInfo, JobSpec, JobState, ListNodesResponse, Matrix,
    NodeInfo, NodeState, Placement, Quantiles, RankWait, SliceInfo, Stats, Submesh,
};

pub fn running_job() -> JobInfo {
    JobInfo {
        id: 12,
        user: "alice".into(),
        uid: 1000,
        gid: 100,
        spec: Some(JobSpec {
            shape: "8".into(),
            argv: vec!["./a.out".into(), "-x".into(), "two words".into()],
            cwd: "/home/alice".into(),
            env: Default::default(),
            time_limit_s: 600,
            stdin: true,
            name: String::new(),
            gang: GangMode::Unspecified as i32,
            on_deadlock: 0,
            msg_context: 0,
            mpi: 0,
            mpi_check: false,
            output: String::new(),
            error: String::new(),
            ..Default::default()
        }),
        state: JobState::Running as i32,
        w: 4,
        h: 2,
        submesh: Some(Submesh {
            x: 0,
            y: 0,
            w: 4,
            h: 2,
        }),
        slices: vec![0, 2],
        exit_code: None,
        reason: String::new(),
        submit_ns: 1_700_000_000_000_000_000,
        start_ns: 1_700_000_001_500_000_000,
        end_ns: 0,
        run_ns: 12_345_000_000,
        gang: GangMode::Stop as i32,
        ranks_done: 0,
        deadlock: None,
        on_deadlock: DeadlockPolicy::Report as i32,
        ..Default::default()
    }
}

/// The running job, found deadlocked: rank 0 waits for rank 1 tag 7, rank 1 for anyone.
pub fn deadlocked_job() -> JobInfo {
    let wait = |rank, x, source, tag| RankWait {
        rank,
        x,
        y: 0,
        source,
        tag,
        since_ns: 1_700_000_002_000_000_000,
    };
    JobInfo {
        deadlock: Some(Deadlock {
            detected_ns: 1_700_000_003_000_000_000,
            waits: vec![wait(0, 0, 1, 7), wait(1, 1, -1, -1)],
            messages: 42,
        }),
        ..running_job()
    }
}

pub fn queued_job() -> JobInfo {
    JobInfo {
        id: 13,
        user: "bob".into(),
        uid: 1001,
        spec: Some(JobSpec {
            shape: "3x3".into(),
            argv: vec!["hostname".into()],
            name: "big one".into(),
            ..Default::default()
        }),
        state: JobState::Queued as i32,
        pending_reason: "waiting for node (1,0): drained".into(),
        ..Default::default()
    }
}

pub fn failed_job() -> JobInfo {
    JobInfo {
        id: 9,
        user: "carol".into(),
        uid: 7,
        spec: Some(JobSpec {
            shape: "2x1".into(),
            argv: vec!["false".into()],
            gang: GangMode::Priority as i32,
            ..Default::default()
        }),
        state: JobState::Failed as i32,
        w: 2,
        h: 1,
        submesh: Some(Submesh {
            x: 2,
            y: 3,
            w: 2,
            h: 1,
        }),
        exit_code: Some(1),
        reason: "rank 1 on node 3,3 exited with 1".into(),
        submit_ns: 5,
        start_ns: 6,
        end_ns: 7,
        run_ns: 3_723_000_000_000,
        gang: GangMode::Priority as i32,
        ranks_done: 2,
        ..Default::default()
    }
}

pub fn nodes() -> ListNodesResponse {
    ListNodesResponse {
        mesh_w: 2,
        mesh_h: 1,
        nodes: vec![
            NodeInfo {
                x: 0,
                y: 0,
                state: NodeState::Up as i32,
                address: "127.0.0.1:4000".into(),
                jobs: vec![3, 4],
                clock_offset_ns: -1_250_000,
                clock_error_ns: 40_000,
                last_heartbeat_ns: 99,
                clock_from_host: false,
                table_version: 7,
                ..Default::default()
            },
            NodeInfo {
                x: 1,
                y: 0,
                state: NodeState::Down as i32,
                ..Default::default()
            },
            NodeInfo {
                x: 0,
                y: 1,
                state: NodeState::Up as i32,
                address: "127.0.0.1:4001".into(),
                clock_offset_ns: 12_340,
                clock_error_ns: 9_500,
                table_version: 6,
                ..Default::default()
            },
            NodeInfo {
                x: 1,
                y: 1,
                state: NodeState::Drained as i32,
                address: "127.0.0.1:4002".into(),
                clock_from_host: true,
                table_version: 7,
                ..Default::default()
            },
        ],
    }
}

/// Slice 0 of a 4x4 mesh holds job 1 on 2x2 at (0,0); jobs 5 and 6 queue; no table yet.
pub fn matrix() -> Matrix {
    Matrix {
        mesh_w: 4,
        mesh_h: 4,
        mpl: 1,
        slices: vec![SliceInfo {
            id: 0,
            placements: vec![Placement {
                job_id: 1,
                submesh: Some(Submesh {
                    x: 0,
                    y: 0,
                    w: 2,
                    h: 2,
                }),
                home: true,
            }],
        }],
        queue: vec![5, 6],
        ..Default::default()
    }
}
pub fn stats() -> Stats {
    Stats {
        skew: Some(Quantiles {
            count: 1200,
            p50_ns: 12_340,
            p99_ns: 85_000,
            max_ns: 1_250_000,
            mean_ns: 15_100,
        }),
        switch_latency: Some(Quantiles {
            count: 19_200,
            p50_ns: 48_000,
            p99_ns: 210_000,
            max_ns: 3_400_000,
            mean_ns: 61_234,
        }),
        switch_cost: None,
        switches_reported: 19_200,
        switches_dropped: 3,
        table_version: 9,
        quantum_ns: 50_000_000,
        msg_flushed: 0,
        msg_unflushed: 0,
        ..Default::default()
    }
}
