//! The JSON shapes of `--output json`: serde structs converted from the proto types (which
//! do not derive `Serialize`). Field names follow the proto's; durations and times are
//! integer nanoseconds.

use gang_proto::v1::{JobInfo, ListNodesResponse, Matrix, NodeInfo, Quantiles, Stats};
use serde::Serialize;

use crate::args::gang_mode;
use crate::output::format::{job_label, job_name, job_parent, job_shape};
use crate::output::matrix_view;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubmeshJson {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

/// A job. `shape` is the resolved `WxH` once known, else the requested shape. `run_ns` is
/// the time the job was scheduled to run (its slots; what its time limit counts), `gang`
/// the mode in force (`stop`, `priority`, `none`, `freeze`; `default` if the master did
/// not resolve it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobJson {
    pub id: u64,
    /// The job as Slurm names it: `12`, a step `12.1`, an array task `17_10`, or a
    /// compact line of an array's waiting tasks `17_[10-20%4]`.
    pub job_id: String,
    /// A step's allocation, an array task's array (absent for other jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    pub user: String,
    pub uid: u32,
    pub state: String,
    pub shape: String,
    pub submesh: Option<SubmeshJson>,
    pub slices: Vec<u32>,
    pub exit_code: Option<i32>,
    pub reason: String,
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub submit_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    pub run_ns: i64,
    pub gang: String,
    pub ranks_done: u32,
    pub on_deadlock: String,
    /// The shape or node count as the user asked it (`5`, `2x3`); `shape` is what was
    /// granted.
    pub asked: String,
    /// Seconds of run time allowed; 0: none.
    pub time_limit_s: u64,
    /// Why a queued job waits (`waiting for node (1,0): drained`, `priority`,
    /// `resources`); empty otherwise.
    pub pending_reason: String,
    /// `slices` by their place in the matrix, 0 to MPL-1 (how `gangctl` shows them).
    pub slice_rows: Vec<u32>,
    /// Set once the job was found deadlocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadlock: Option<DeadlockJson>,
    /// Bytes of a rank's stream that never reached the master (`stream`: stdout or
    /// stderr); absent when nothing was lost.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_lost: Vec<OutputLossJson>,
    /// What it waits for (`afterok:12,afterany:13`); absent when nothing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dependency: String,
    /// Who holds it (absent: nobody).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub held_by: String,
    /// A task of a job array: the array's id and the task index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<u32>,
    /// What its ranks used (absent: nothing measured yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageJson>,
    /// An allocation (`gangctl alloc`, `gangctl submit`), and its steps' job ids.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allocation: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub step_ids: Vec<u64>,
    /// A step: its allocation and its number there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// A task of an array with a limit: how many of its tasks run at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array_throttle: Option<u32>,
    /// The array's own id (its first task): every task's index, in the order of their ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub array_task_indices: Vec<u32>,
    /// A compact line (`gangctl jobs`): the indices of the array's tasks that wait
    /// together, and their job ids (`id` is the first of them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub array_task_ids: Vec<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub task_job_ids: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageJson {
    pub ranks_measured: u32,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub max_rss_bytes: u64,
    pub max_rss_rank: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputLossJson {
    pub rank: u32,
    pub stream: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadlockJson {
    pub detected_ns: i64,
    pub messages: u64,
    pub waits: Vec<RankWaitJson>,
}

/// `source` and `tag` are -1 for any.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankWaitJson {
    pub rank: u32,
    pub x: u32,
    pub y: u32,
    pub source: i32,
    pub tag: i32,
    pub since_ns: i64,
}

impl From<&JobInfo> for JobJson {
    fn from(j: &JobInfo) -> Self {
        let spec = j.spec.clone().unwrap_or_default();
        JobJson {
            id: j.id,
            job_id: job_label(j),
            parent: job_parent(j),
            user: j.user.clone(),
            uid: j.uid,
            state: j.state().label().to_string(),
            shape: job_shape(j),
            submesh: j.submesh.map(|s| SubmeshJson {
                x: s.x,
                y: s.y,
                w: s.w,
                h: s.h,
            }),
            slices: j.slices.clone(),
            exit_code: j.exit_code,
            reason: j.reason.clone(),
            name: job_name(j),
            argv: spec.argv.clone(),
            cwd: spec.cwd.clone(),
            submit_ns: j.submit_ns,
            start_ns: j.start_ns,
            end_ns: j.end_ns,
            run_ns: j.run_ns,
            gang: gang_mode::label(j.gang()).to_string(),
            ranks_done: j.ranks_done,
            on_deadlock: match j.on_deadlock() {
                gang_proto::v1::DeadlockPolicy::Kill => "kill",
                _ => "report",
            }
            .to_string(),
            asked: spec.shape.clone(),
            time_limit_s: spec.time_limit_s,
            dependency: spec.dependency.clone(),
            held_by: j.held_by.clone(),
            array_job_id: (j.array_job_id != 0).then_some(j.array_job_id),
            array_task_id: j.array_task_id,
            allocation: spec.allocate,
            step_ids: j.step_ids.clone(),
            allocation_id: (j.allocation_id != 0).then_some(j.allocation_id),
            step: j.step.filter(|_| j.allocation_id != 0),
            array_throttle: (j.array_job_id != 0 && j.array_throttle > 0)
                .then_some(j.array_throttle),
            array_task_indices: j.array_task_indices.clone(),
            array_task_ids: Vec::new(),
            task_job_ids: Vec::new(),
            usage: j.usage.filter(|u| u.ranks_measured > 0).map(|u| UsageJson {
                ranks_measured: u.ranks_measured,
                cpu_user_ns: u.cpu_user_ns,
                cpu_system_ns: u.cpu_system_ns,
                max_rss_bytes: u.max_rss_bytes,
                max_rss_rank: u.max_rss_rank,
            }),
            pending_reason: j.pending_reason.clone(),
            slice_rows: j.slice_rows.clone(),
            deadlock: j.deadlock.as_ref().map(|d| DeadlockJson {
                detected_ns: d.detected_ns,
                messages: d.messages,
                waits: d
                    .waits
                    .iter()
                    .map(|w| RankWaitJson {
                        rank: w.rank,
                        x: w.x,
                        y: w.y,
                        source: w.source,
                        tag: w.tag,
                        since_ns: w.since_ns,
                    })
                    .collect(),
            }),
            output_lost: j
                .output_lost
                .iter()
                .map(|l| OutputLossJson {
                    rank: l.rank,
                    stream: match l.stream() {
                        gang_proto::v1::Stream::Stderr => "stderr",
                        _ => "stdout",
                    }
                    .to_string(),
                    bytes: l.bytes,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeJson {
    pub x: u32,
    pub y: u32,
    pub state: String,
    pub address: String,
    pub jobs: Vec<u64>,
    pub clock_offset_ns: i64,
    pub clock_error_ns: i64,
    pub last_heartbeat_ns: i64,
    pub clock_from_host: bool,
    pub table_version: u64,
    /// The same table as the master's short count (`v3` in text); 0 if not known.
    pub table_seq: u64,
}

impl From<&NodeInfo> for NodeJson {
    fn from(n: &NodeInfo) -> Self {
        NodeJson {
            x: n.x,
            y: n.y,
            state: n.state().label().to_string(),
            address: n.address.clone(),
            jobs: n.jobs.clone(),
            clock_offset_ns: n.clock_offset_ns,
            clock_error_ns: n.clock_error_ns,
            last_heartbeat_ns: n.last_heartbeat_ns,
            clock_from_host: n.clock_from_host,
            table_version: n.table_version,
            table_seq: n.table_seq,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodesJson {
    pub mesh_w: u32,
    pub mesh_h: u32,
    pub nodes: Vec<NodeJson>,
}

impl From<&ListNodesResponse> for NodesJson {
    fn from(r: &ListNodesResponse) -> Self {
        NodesJson {
            mesh_w: r.mesh_w,
            mesh_h: r.mesh_h,
            nodes: r.nodes.iter().map(NodeJson::from).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementJson {
    pub job: u64,
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    pub home: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SliceJson {
    /// The master's id (`row_slices` names slices by it).
    pub id: u32,
    /// Its place in the matrix, 0 to MPL-1: how `gangctl slices` numbers it.
    pub row: u32,
    pub placements: Vec<PlacementJson>,
}

/// The matrix and the slice table in force (the proto's fields; `running_slice` is
/// `row_slices[running_row]`, for convenience).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixJson {
    pub mesh_w: u32,
    pub mesh_h: u32,
    pub mpl: u32,
    pub slices: Vec<SliceJson>,
    pub queue: Vec<u64>,
    pub table_version: u64,
    /// The table as a short count of the master's tables this run (`v3` in text).
    pub table_seq: u64,
    pub epoch_ns: i64,
    pub quantum_ns: i64,
    pub effective_ns: i64,
    pub row_slices: Vec<u32>,
    pub now_ns: i64,
    pub running_row: Option<u32>,
    pub running_slice: Option<u32>,
    /// Jobs given no slots (deadlocked, held stopped until cancelled); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parked: Vec<u64>,
}

impl From<&Matrix> for MatrixJson {
    fn from(m: &Matrix) -> Self {
        MatrixJson {
            mesh_w: m.mesh_w,
            mesh_h: m.mesh_h,
            mpl: m.mpl,
            slices: m
                .slices
                .iter()
                .enumerate()
                .map(|(row, s)| SliceJson {
                    id: s.id,
                    row: row as u32,
                    placements: s
                        .placements
                        .iter()
                        .map(|p| {
                            let sm = p.submesh.unwrap_or_default();
                            PlacementJson {
                                job: p.job_id,
                                x: sm.x,
                                y: sm.y,
                                w: sm.w,
                                h: sm.h,
                                home: p.home,
                            }
                        })
                        .collect(),
                })
                .collect(),
            queue: m.queue.clone(),
            table_version: m.table_version,
            table_seq: m.table_seq,
            epoch_ns: m.epoch_ns,
            quantum_ns: m.quantum_ns,
            effective_ns: m.effective_ns,
            row_slices: m.row_slices.clone(),
            now_ns: m.now_ns,
            running_row: m.running_row,
            running_slice: matrix_view::running_slice(m),
            parked: m.parked.clone(),
        }
    }
}

/// A distribution, nanoseconds (the proto's `Quantiles`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuantilesJson {
    pub count: u64,
    pub p50_ns: i64,
    pub p99_ns: i64,
    pub max_ns: i64,
    pub mean_ns: i64,
}

impl From<&Quantiles> for QuantilesJson {
    fn from(q: &Quantiles) -> Self {
        QuantilesJson {
            count: q.count,
            p50_ns: q.p50_ns,
            p99_ns: q.p99_ns,
            max_ns: q.max_ns,
            mean_ns: q.mean_ns,
        }
    }
}

/// `gangctl stats` (the proto's `Stats`; a missing distribution is all zeros).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsJson {
    pub skew: QuantilesJson,
    pub switch_latency: QuantilesJson,
    pub switch_cost: QuantilesJson,
    pub switches_reported: u64,
    pub switches_dropped: u64,
    pub table_version: u64,
    /// The table in force as the master's short count; 0 if none.
    pub table_seq: u64,
    pub quantum_ns: i64,
    pub msg_flushed: u64,
    pub msg_unflushed: u64,
}

impl From<&Stats> for StatsJson {
    fn from(s: &Stats) -> Self {
        let q = |q: &Option<Quantiles>| QuantilesJson::from(&q.unwrap_or_default());
        StatsJson {
            skew: q(&s.skew),
            switch_latency: q(&s.switch_latency),
            switch_cost: q(&s.switch_cost),
            switches_reported: s.switches_reported,
            switches_dropped: s.switches_dropped,
            table_version: s.table_version,
            table_seq: s.table_seq,
            quantum_ns: s.quantum_ns,
            msg_flushed: s.msg_flushed,
            msg_unflushed: s.msg_unflushed,
        }
    }
}

/// An error under `--output json` (on stderr, one line): `code` is gRPC's status name for
/// the master's answers (`NOT_FOUND`), else the CLI's own (`USAGE`, `UNAVAILABLE`,
/// `LOCAL`); `message` is what the text mode prints after `gangctl: `.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorJson {
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::{failed_job, matrix, nodes, queued_job, running_job, stats};
    use serde_json::json;

    #[test]
    fn job_json_shape() {
        let v = serde_json::to_value(JobJson::from(&running_job())).unwrap();
        assert_eq!(
            v,
            json!({
                "id": 12, "job_id": "12", "user": "alice", "uid": 1000, "state": "running", "shape": "4x2",
                "submesh": {"x": 0, "y": 0, "w": 4, "h": 2}, "slices": [0, 2], "exit_code": null,
                "reason": "", "name": "./a.out", "argv": ["./a.out", "-x", "two words"],
                "cwd": "/home/alice", "submit_ns": 1_700_000_000_000_000_000i64,
                "start_ns": 1_700_000_001_500_000_000i64, "end_ns": 0,
                "run_ns": 12_345_000_000i64, "gang": "stop", "ranks_done": 0,
                "on_deadlock": "report", "asked": "8", "time_limit_s": 600, "pending_reason": "",
                "slice_rows": []
            })
        );
        let v = serde_json::to_value(JobJson::from(&queued_job())).unwrap();
        assert_eq!(v["shape"], "3x3", "the requested shape while unresolved");
        assert_eq!(v["submesh"], serde_json::Value::Null);
        assert_eq!(v["state"], "queued");
        assert_eq!(v["name"], "big one");
        assert_eq!(v["run_ns"], 0);
        assert_eq!(v["gang"], "default", "not resolved by the master");
        let v = serde_json::to_value(JobJson::from(&failed_job())).unwrap();
        assert_eq!(v["exit_code"], 1);
        assert_eq!(v["gang"], "priority");
        assert_eq!(v["ranks_done"], 2);
        assert_eq!(v["reason"], "rank 1 on node 3,3 exited with 1");
    }

    #[test]
    fn nodes_json_shape() {
        let v = serde_json::to_value(NodesJson::from(&nodes())).unwrap();
        assert_eq!(
            v,
            json!({
                "mesh_w": 2, "mesh_h": 1,
                "nodes": [
                    {"x": 0, "y": 0, "state": "up", "address": "127.0.0.1:4000", "jobs": [3, 4],
                     "clock_offset_ns": -1_250_000, "clock_error_ns": 40_000, "last_heartbeat_ns": 99,
                     "clock_from_host": false, "table_version": 7, "table_seq": 0},
                    {"x": 1, "y": 0, "state": "down", "address": "", "jobs": [],
                     "clock_offset_ns": 0, "clock_error_ns": 0, "last_heartbeat_ns": 0,
                     "clock_from_host": false, "table_version": 0, "table_seq": 0},
                    {"x": 0, "y": 1, "state": "up", "address": "127.0.0.1:4001", "jobs": [],
                     "clock_offset_ns": 12_340, "clock_error_ns": 9_500, "last_heartbeat_ns": 0,
                     "clock_from_host": false, "table_version": 6, "table_seq": 0},
                    {"x": 1, "y": 1, "state": "drained", "address": "127.0.0.1:4002", "jobs": [],
                     "clock_offset_ns": 0, "clock_error_ns": 0, "last_heartbeat_ns": 0,
                     "clock_from_host": true, "table_version": 7, "table_seq": 0}
                ]
            })
        );
    }

    #[test]
    fn matrix_json_shape() {
        let mut m = matrix();
        let v = serde_json::to_value(MatrixJson::from(&m)).unwrap();
        assert_eq!(
            v,
            json!({"mesh_w":4,"mesh_h":4,"mpl":1,"slices":[{"id":0,"row":0,"placements":[{"job":1,"x":0,"y":0,"w":2,"h":2,"home":true}]}],"queue":[5,6],
                   "table_version":0,"table_seq":0,"epoch_ns":0,"quantum_ns":0,"effective_ns":0,"row_slices":[],"now_ns":0,
                   "running_row":null,"running_slice":null})
        );
        m.table_version = 4;
        m.epoch_ns = 1_000;
        m.quantum_ns = 50_000_000;
        m.effective_ns = 100_001_000;
        m.row_slices = vec![3, 0];
        m.now_ns = 160_000_000;
        m.running_row = Some(1);
        let v = serde_json::to_value(MatrixJson::from(&m)).unwrap();
        assert_eq!(v["table_version"], 4);
        assert_eq!(v["quantum_ns"], 50_000_000);
        assert_eq!(v["effective_ns"], 100_001_000);
        assert_eq!(v["row_slices"], json!([3, 0]));
        assert_eq!(v["now_ns"], 160_000_000);
        assert_eq!(v["running_row"], 1);
        assert_eq!(v["running_slice"], 0);
    }
    #[test]
    fn stats_json_shape() {
        let v = serde_json::to_value(StatsJson::from(&stats())).unwrap();
        assert_eq!(
            v,
            json!({
                "skew": {"count": 1200, "p50_ns": 12_340, "p99_ns": 85_000, "max_ns": 1_250_000, "mean_ns": 15_100},
                "switch_latency": {"count": 19_200, "p50_ns": 48_000, "p99_ns": 210_000, "max_ns": 3_400_000, "mean_ns": 61_234},
                "switch_cost": {"count": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0, "mean_ns": 0},
                "switches_reported": 19_200, "switches_dropped": 3, "table_version": 9, "table_seq": 0,
                "quantum_ns": 50_000_000, "msg_flushed": 0, "msg_unflushed": 0
            })
        );
    }
}
