//! Output modes (`--output cli|json`) and the views `gangctl` renders in them.
//!
//! Every command result is a [`View`]: it knows its text for people ([`View::cli`]) and its
//! JSON value ([`View::json`], serde structs defined here and converted from the proto
//! types, which do not derive `Serialize`). [`OutputMode::render`] picks one; commands
//! never branch on the mode themselves.

use gang_proto::v1::{JobInfo, ListNodesResponse, Matrix, NodeInfo, Quantiles, Stats};
use serde::Serialize;

use crate::gang_mode;
use crate::matrix_view;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputMode {
    /// Tables and text for people.
    #[default]
    Cli,
    /// JSON for programs (one document per command).
    Json,
}

/// Something a command prints.
pub trait View {
    type Json: Serialize;
    /// The JSON value (serialized by [`OutputMode::render`]).
    fn json(&self) -> Self::Json;
    /// The text for people, ending with a newline (or empty).
    fn cli(&self) -> String;
}

impl OutputMode {
    /// The text to print for `view` in this mode (ends with a newline unless empty).
    pub fn render<V: View>(self, view: &V) -> String {
        match self {
            OutputMode::Cli => view.cli(),
            OutputMode::Json => {
                let mut s = serde_json::to_string_pretty(&view.json())
                    .expect("JSON views always serialize");
                s.push('\n');
                s
            }
        }
    }

    /// Like [`render`](Self::render), but JSON on one line (for `--watch` streams).
    pub fn render_compact<V: View>(self, view: &V) -> String {
        match self {
            OutputMode::Cli => view.cli(),
            OutputMode::Json => {
                let mut s =
                    serde_json::to_string(&view.json()).expect("JSON views always serialize");
                s.push('\n');
                s
            }
        }
    }
}

// ---------------------------------------------------------------- JSON shapes

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
}

impl From<&JobInfo> for JobJson {
    fn from(j: &JobInfo) -> Self {
        let spec = j.spec.clone().unwrap_or_default();
        JobJson {
            id: j.id,
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
            argv: spec.argv,
            cwd: spec.cwd,
            submit_ns: j.submit_ns,
            start_ns: j.start_ns,
            end_ns: j.end_ns,
            run_ns: j.run_ns,
            gang: gang_mode::label(j.gang()).to_string(),
            ranks_done: j.ranks_done,
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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodesJson {
    pub mesh_w: u32,
    pub mesh_h: u32,
    pub nodes: Vec<NodeJson>,
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
    pub id: u32,
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
    pub epoch_ns: i64,
    pub quantum_ns: i64,
    pub effective_ns: i64,
    pub row_slices: Vec<u32>,
    pub now_ns: i64,
    pub running_row: Option<u32>,
    pub running_slice: Option<u32>,
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
                .map(|s| SliceJson {
                    id: s.id,
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
            epoch_ns: m.epoch_ns,
            quantum_ns: m.quantum_ns,
            effective_ns: m.effective_ns,
            row_slices: m.row_slices.clone(),
            now_ns: m.now_ns,
            running_row: m.running_row,
            running_slice: matrix_view::running_slice(m),
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
    pub quantum_ns: i64,
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
            quantum_ns: s.quantum_ns,
        }
    }
}

// ---------------------------------------------------------------- views

/// `gangctl jobs`: a table, or a JSON array of jobs.
pub struct JobsView<'a>(pub &'a [JobInfo]);

impl View for JobsView<'_> {
    type Json = Vec<JobJson>;

    fn json(&self) -> Vec<JobJson> {
        self.0.iter().map(JobJson::from).collect()
    }

    fn cli(&self) -> String {
        let rows = self
            .0
            .iter()
            .map(|j| {
                vec![
                    j.id.to_string(),
                    dash(&j.user),
                    j.state().label().to_string(),
                    dash(&job_shape(j)),
                    j.submesh
                        .map(|s| fmt_submesh(&s))
                        .unwrap_or_else(|| "-".into()),
                    fmt_list(&j.slices),
                    j.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "-".into()),
                    fmt_job_run(j),
                    gang_mode::label(j.gang()).to_string(),
                    dash(&job_name(j)),
                ]
            })
            .collect();
        table(
            &[
                "ID", "USER", "STATE", "SHAPE", "SUBMESH", "SLICES", "EXIT", "RUN", "GANG", "NAME",
            ],
            rows,
        )
    }
}

/// `gangctl job ID`: `key: value` lines, or one JSON job.
pub struct JobView<'a>(pub &'a JobInfo);

impl View for JobView<'_> {
    type Json = JobJson;

    fn json(&self) -> JobJson {
        JobJson::from(self.0)
    }

    fn cli(&self) -> String {
        let j = self.0;
        let spec = j.spec.clone().unwrap_or_default();
        let shape = job_shape(j);
        let shape = if !spec.shape.is_empty() && spec.shape != shape {
            format!("{shape} (asked {})", spec.shape)
        } else {
            dash(&shape)
        };
        let pairs: Vec<(&str, String)> = vec![
            ("id", j.id.to_string()),
            ("name", dash(&job_name(j))),
            (
                "user",
                format!("{} (uid {}, gid {})", dash(&j.user), j.uid, j.gid),
            ),
            ("state", j.state().label().to_string()),
            ("shape", shape),
            (
                "submesh",
                j.submesh
                    .map(|s| fmt_submesh(&s))
                    .unwrap_or_else(|| "-".into()),
            ),
            ("slices", fmt_list(&j.slices)),
            (
                "exit code",
                j.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            ("reason", dash(&j.reason)),
            ("command", dash(&shell_join(&spec.argv))),
            ("cwd", dash(&spec.cwd)),
            (
                "time limit",
                if spec.time_limit_s == 0 {
                    "none".into()
                } else {
                    format!("{} s", spec.time_limit_s)
                },
            ),
            ("run time", fmt_job_run(j)),
            ("gang mode", {
                let mode = gang_mode::label(j.gang());
                if spec.gang() == gang_proto::v1::GangMode::Unspecified {
                    format!("{mode} (cluster default)")
                } else {
                    mode.to_string()
                }
            }),
            (
                "stdin",
                if spec.stdin { "attached" } else { "/dev/null" }.into(),
            ),
            ("submitted", fmt_time_ns(j.submit_ns)),
            ("started", fmt_time_ns(j.start_ns)),
            ("ended", fmt_time_ns(j.end_ns)),
        ];
        key_values(&pairs)
    }
}

/// `gangctl cancel`: `cancelled N` lines, or a JSON array of the cancelled jobs.
pub struct CancelledView<'a>(pub &'a [JobInfo]);

impl View for CancelledView<'_> {
    type Json = Vec<JobJson>;

    fn json(&self) -> Vec<JobJson> {
        self.0.iter().map(JobJson::from).collect()
    }

    fn cli(&self) -> String {
        self.0
            .iter()
            .map(|j| format!("cancelled {}\n", j.id))
            .collect()
    }
}

/// `gangctl nodes`: a table, or `{"mesh_w","mesh_h","nodes":[...]}`.
pub struct NodesView<'a>(pub &'a ListNodesResponse);

impl View for NodesView<'_> {
    type Json = NodesJson;

    fn json(&self) -> NodesJson {
        NodesJson {
            mesh_w: self.0.mesh_w,
            mesh_h: self.0.mesh_h,
            nodes: self.0.nodes.iter().map(NodeJson::from).collect(),
        }
    }

    fn cli(&self) -> String {
        let clocks = clock_cells(&self.0.nodes);
        let rows = self
            .0
            .nodes
            .iter()
            .zip(clocks)
            .map(|(n, clock)| {
                vec![
                    format!("{},{}", n.x, n.y),
                    n.state().label().to_string(),
                    dash(&n.address),
                    fmt_list(&n.jobs),
                    clock,
                    if n.table_version == 0 {
                        "-".into()
                    } else {
                        n.table_version.to_string()
                    },
                ]
            })
            .collect();
        table(
            &["NODE", "STATE", "ADDRESS", "JOBS", "CLOCK-OFFSET", "TABLE"],
            rows,
        )
    }
}

/// The clock column of `gangctl nodes`: `+12.3µs ±40µs` (offsets padded to one width so
/// the error bounds line up), `host` for an agent trusting its host clock, `-` for one
/// that has not reported an estimate.
fn clock_cells(nodes: &[NodeInfo]) -> Vec<String> {
    let cells: Vec<Option<(String, String)>> = nodes
        .iter()
        .map(|n| {
            let probed = n.clock_offset_ns != 0 || n.clock_error_ns != 0;
            (probed && !n.clock_from_host).then(|| {
                (
                    fmt_ns(n.clock_offset_ns, true),
                    format!("±{}", fmt_ns(n.clock_error_ns, false)),
                )
            })
        })
        .collect();
    let width = cells
        .iter()
        .flatten()
        .map(|(o, _)| o.chars().count())
        .max()
        .unwrap_or(0);
    nodes
        .iter()
        .zip(cells)
        .map(|(n, cell)| match cell {
            Some((offset, error)) => format!("{offset:<width$} {error}"),
            None if n.clock_from_host => "host".into(),
            None => "-".into(),
        })
        .collect()
}

/// `gangctl drain` / `resume`: `node X,Y: STATE`, or the node object.
pub struct NodeView<'a>(pub &'a NodeInfo);

impl View for NodeView<'_> {
    type Json = NodeJson;

    fn json(&self) -> NodeJson {
        NodeJson::from(self.0)
    }

    fn cli(&self) -> String {
        format!(
            "node {},{}: {}\n",
            self.0.x,
            self.0.y,
            self.0.state().label()
        )
    }
}

/// `gangctl slices`: the drawn matrix, or its JSON.
pub struct MatrixView<'a>(pub &'a Matrix);

impl View for MatrixView<'_> {
    type Json = MatrixJson;

    fn json(&self) -> MatrixJson {
        MatrixJson::from(self.0)
    }

    fn cli(&self) -> String {
        matrix_view::draw(self.0)
    }
}

/// `gangctl stats`: a table of the three distributions and the counters, or
/// [`StatsJson`].
pub struct StatsView<'a>(pub &'a Stats);

impl View for StatsView<'_> {
    type Json = StatsJson;

    fn json(&self) -> StatsJson {
        StatsJson::from(self.0)
    }

    fn cli(&self) -> String {
        let s = self.0;
        let row = |name: &str, q: &Option<Quantiles>| {
            let q = q.unwrap_or_default();
            let mut cells = vec![name.to_string(), q.count.to_string()];
            for v in [q.p50_ns, q.p99_ns, q.max_ns, q.mean_ns] {
                cells.push(if q.count == 0 {
                    "-".into()
                } else {
                    fmt_ns(v, false)
                });
            }
            cells
        };
        let mut out = table(
            &["", "COUNT", "P50", "P99", "MAX", "MEAN"],
            vec![
                row("skew", &s.skew),
                row("switch latency", &s.switch_latency),
                row("switch cost", &s.switch_cost),
            ],
        );
        out.push_str(&format!(
            "switches: {} reported, {} dropped\n",
            s.switches_reported, s.switches_dropped
        ));
        out.push_str(&if s.table_version == 0 {
            format!(
                "slice table: none in force; quantum {}\n",
                fmt_ns(s.quantum_ns, false)
            )
        } else {
            format!(
                "slice table: version {}, quantum {}\n",
                s.table_version,
                fmt_ns(s.quantum_ns, false)
            )
        });
        out
    }
}

// ---------------------------------------------------------------- helpers

/// The resolved shape `WxH`, or the requested one while unresolved.
pub fn job_shape(j: &JobInfo) -> String {
    if j.w > 0 && j.h > 0 {
        format!("{}x{}", j.w, j.h)
    } else {
        j.spec.as_ref().map(|s| s.shape.clone()).unwrap_or_default()
    }
}

/// The display name: the given name, else argv[0].
pub fn job_name(j: &JobInfo) -> String {
    let Some(spec) = &j.spec else {
        return String::new();
    };
    if !spec.name.is_empty() {
        spec.name.clone()
    } else {
        spec.argv.first().cloned().unwrap_or_default()
    }
}

/// `WxH@(X,Y)`.
pub fn fmt_submesh(s: &gang_proto::v1::Submesh) -> String {
    format!("{}x{}@({},{})", s.w, s.h, s.x, s.y)
}

fn fmt_list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// Columns padded to their widest cell, two spaces apart; no trailing blanks.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i] - cell.chars().count();
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:")))
        .collect()
}

/// Arguments joined for a shell: plain words as they are, others single-quoted.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Nanoseconds for people, to 3 significant digits: `850ns`, `12.5µs`, `+40µs`, `1.25ms`,
/// `-2s`. `signed` puts `+` before positive values.
pub fn fmt_ns(ns: i64, signed: bool) -> String {
    let sign = if ns < 0 {
        "-"
    } else if signed {
        "+"
    } else {
        ""
    };
    format!("{sign}{}", fmt_abs_ns(ns.unsigned_abs()))
}

fn fmt_abs_ns(a: u64) -> String {
    if a < 1000 {
        return format!("{a}ns");
    }
    const UNITS: [(f64, &str); 3] = [(1e3, "µs"), (1e6, "ms"), (1e9, "s")];
    let mut i = if a < 1_000_000 {
        0
    } else if a < 1_000_000_000 {
        1
    } else {
        2
    };
    loop {
        let text = three_digits(a as f64 / UNITS[i].0);
        // 999.96µs rounds to "1000": say 1ms instead.
        if i + 1 < UNITS.len() && text.len() >= 4 && !text.contains('.') {
            i += 1;
            continue;
        }
        return format!("{text}{}", UNITS[i].1);
    }
}

/// `v` (at least 1) to 3 significant digits, without trailing zeros: 1.25, 40, 12.3, 850.
fn three_digits(v: f64) -> String {
    let decimals = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A duration for people: `fmt_ns` below a minute (`850ms`, `12.3s`), else `4m05s`,
/// `1h02m03s`; `0s` for nothing.
pub fn fmt_duration_ns(ns: i64) -> String {
    if ns <= 0 {
        return "0s".into();
    }
    if ns < 60_000_000_000 {
        return fmt_ns(ns, false);
    }
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h == 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{h}h{m:02}m{s:02}s")
    }
}

/// A job's run time (scheduled time in its slots), `-` before it started.
fn fmt_job_run(j: &JobInfo) -> String {
    if j.run_ns == 0 && j.start_ns == 0 {
        "-".into()
    } else {
        fmt_duration_ns(j.run_ns)
    }
}

/// A Unix time in nanoseconds as `YYYY-MM-DD HH:MM:SS UTC`; `-` for 0.
pub fn fmt_time_ns(ns: i64) -> String {
    if ns <= 0 {
        return "-".into();
    }
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 -> (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::{GangMode, JobSpec, JobState, NodeState, Placement, SliceInfo, Submesh};
    use serde_json::json;

    fn running_job() -> JobInfo {
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
        }
    }

    fn queued_job() -> JobInfo {
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
            ..Default::default()
        }
    }

    fn failed_job() -> JobInfo {
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

    #[test]
    fn job_json_shape() {
        let v = serde_json::to_value(JobView(&running_job()).json()).unwrap();
        assert_eq!(
            v,
            json!({
                "id": 12, "user": "alice", "uid": 1000, "state": "running", "shape": "4x2",
                "submesh": {"x": 0, "y": 0, "w": 4, "h": 2}, "slices": [0, 2], "exit_code": null,
                "reason": "", "name": "./a.out", "argv": ["./a.out", "-x", "two words"],
                "cwd": "/home/alice", "submit_ns": 1_700_000_000_000_000_000i64,
                "start_ns": 1_700_000_001_500_000_000i64, "end_ns": 0,
                "run_ns": 12_345_000_000i64, "gang": "stop", "ranks_done": 0
            })
        );
        let v = serde_json::to_value(JobView(&queued_job()).json()).unwrap();
        assert_eq!(v["shape"], "3x3", "the requested shape while unresolved");
        assert_eq!(v["submesh"], serde_json::Value::Null);
        assert_eq!(v["state"], "queued");
        assert_eq!(v["name"], "big one");
        assert_eq!(v["run_ns"], 0);
        assert_eq!(v["gang"], "default", "not resolved by the master");
        let v = serde_json::to_value(JobView(&failed_job()).json()).unwrap();
        assert_eq!(v["exit_code"], 1);
        assert_eq!(v["gang"], "priority");
        assert_eq!(v["ranks_done"], 2);
        assert_eq!(v["reason"], "rank 1 on node 3,3 exited with 1");
    }

    #[test]
    fn jobs_json_is_an_array() {
        let jobs = vec![running_job(), queued_job()];
        let text = OutputMode::Json.render(&JobsView(&jobs));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[1]["id"], 13);
        let empty = OutputMode::Json.render(&JobsView(&[]));
        assert_eq!(empty.trim(), "[]");
    }

    #[test]
    fn jobs_table() {
        let jobs = vec![running_job(), queued_job(), failed_job()];
        let text = OutputMode::Cli.render(&JobsView(&jobs));
        let expected = "\
ID  USER   STATE    SHAPE  SUBMESH    SLICES  EXIT  RUN       GANG      NAME
12  alice  running  4x2    4x2@(0,0)  0,2     -     12.3s     stop      ./a.out
13  bob    queued   3x3    -          -       -     -         default   big one
9   carol  failed   2x1    2x1@(2,3)  -       1     1h02m03s  priority  false
";
        assert_eq!(text, expected);
    }

    #[test]
    fn job_key_values() {
        let text = OutputMode::Cli.render(&JobView(&running_job()));
        let expected = "\
id:         12
name:       ./a.out
user:       alice (uid 1000, gid 100)
state:      running
shape:      4x2 (asked 8)
submesh:    4x2@(0,0)
slices:     0,2
exit code:  -
reason:     -
command:    ./a.out -x 'two words'
cwd:        /home/alice
time limit: 600 s
run time:   12.3s
gang mode:  stop (cluster default)
stdin:      attached
submitted:  2023-11-14 22:13:20 UTC
started:    2023-11-14 22:13:21 UTC
ended:      -
";
        assert_eq!(text, expected);
    }

    fn nodes() -> ListNodesResponse {
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

    #[test]
    fn nodes_json_shape() {
        let v = serde_json::to_value(NodesView(&nodes()).json()).unwrap();
        assert_eq!(
            v,
            json!({
                "mesh_w": 2, "mesh_h": 1,
                "nodes": [
                    {"x": 0, "y": 0, "state": "up", "address": "127.0.0.1:4000", "jobs": [3, 4],
                     "clock_offset_ns": -1_250_000, "clock_error_ns": 40_000, "last_heartbeat_ns": 99,
                     "clock_from_host": false, "table_version": 7},
                    {"x": 1, "y": 0, "state": "down", "address": "", "jobs": [],
                     "clock_offset_ns": 0, "clock_error_ns": 0, "last_heartbeat_ns": 0,
                     "clock_from_host": false, "table_version": 0},
                    {"x": 0, "y": 1, "state": "up", "address": "127.0.0.1:4001", "jobs": [],
                     "clock_offset_ns": 12_340, "clock_error_ns": 9_500, "last_heartbeat_ns": 0,
                     "clock_from_host": false, "table_version": 6},
                    {"x": 1, "y": 1, "state": "drained", "address": "127.0.0.1:4002", "jobs": [],
                     "clock_offset_ns": 0, "clock_error_ns": 0, "last_heartbeat_ns": 0,
                     "clock_from_host": true, "table_version": 7}
                ]
            })
        );
    }

    #[test]
    fn nodes_table() {
        let text = OutputMode::Cli.render(&NodesView(&nodes()));
        let expected = "\
NODE  STATE    ADDRESS         JOBS  CLOCK-OFFSET    TABLE
0,0   up       127.0.0.1:4000  3,4   -1.25ms ±40µs   7
1,0   down     -               -     -               -
0,1   up       127.0.0.1:4001  -     +12.3µs ±9.5µs  6
1,1   drained  127.0.0.1:4002  -     host            7
";
        assert_eq!(text, expected);
    }

    #[test]
    fn node_view() {
        let n = NodeInfo {
            x: 1,
            y: 2,
            state: NodeState::Drained as i32,
            ..Default::default()
        };
        assert_eq!(OutputMode::Cli.render(&NodeView(&n)), "node 1,2: drained\n");
        let v: serde_json::Value =
            serde_json::from_str(&OutputMode::Json.render(&NodeView(&n))).unwrap();
        assert_eq!(v["state"], "drained");
        assert_eq!(v["x"], 1);
    }

    #[test]
    fn cancelled_view() {
        let jobs = vec![failed_job(), queued_job()];
        assert_eq!(
            OutputMode::Cli.render(&CancelledView(&jobs)),
            "cancelled 9\ncancelled 13\n"
        );
    }

    #[test]
    fn matrix_json_shape() {
        let mut m = Matrix {
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
        };
        let text = OutputMode::Json.render(&MatrixView(&m));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"mesh_w":4,"mesh_h":4,"mpl":1,"slices":[{"id":0,"placements":[{"job":1,"x":0,"y":0,"w":2,"h":2,"home":true}]}],"queue":[5,6],
                   "table_version":0,"epoch_ns":0,"quantum_ns":0,"effective_ns":0,"row_slices":[],"now_ns":0,
                   "running_row":null,"running_slice":null})
        );
        m.table_version = 4;
        m.epoch_ns = 1_000;
        m.quantum_ns = 50_000_000;
        m.effective_ns = 100_001_000;
        m.row_slices = vec![3, 0];
        m.now_ns = 160_000_000;
        m.running_row = Some(1);
        let v = serde_json::to_value(MatrixView(&m).json()).unwrap();
        assert_eq!(v["table_version"], 4);
        assert_eq!(v["quantum_ns"], 50_000_000);
        assert_eq!(v["effective_ns"], 100_001_000);
        assert_eq!(v["row_slices"], json!([3, 0]));
        assert_eq!(v["now_ns"], 160_000_000);
        assert_eq!(v["running_row"], 1);
        assert_eq!(v["running_slice"], 0);
        let compact = OutputMode::Json.render_compact(&MatrixView(&m));
        assert_eq!(compact.lines().count(), 1);
    }

    fn stats() -> Stats {
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
        }
    }

    #[test]
    fn stats_json_shape() {
        let v = serde_json::to_value(StatsView(&stats()).json()).unwrap();
        assert_eq!(
            v,
            json!({
                "skew": {"count": 1200, "p50_ns": 12_340, "p99_ns": 85_000, "max_ns": 1_250_000, "mean_ns": 15_100},
                "switch_latency": {"count": 19_200, "p50_ns": 48_000, "p99_ns": 210_000, "max_ns": 3_400_000, "mean_ns": 61_234},
                "switch_cost": {"count": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0, "mean_ns": 0},
                "switches_reported": 19_200, "switches_dropped": 3, "table_version": 9,
                "quantum_ns": 50_000_000
            })
        );
    }

    #[test]
    fn stats_table() {
        let expected = concat!(
            "                COUNT  P50     P99    MAX     MEAN\n",
            "skew            1200   12.3µs  85µs   1.25ms  15.1µs\n",
            "switch latency  19200  48µs    210µs  3.4ms   61.2µs\n",
            "switch cost     0      -       -      -       -\n",
            "switches: 19200 reported, 3 dropped\n",
            "slice table: version 9, quantum 50ms\n",
        );
        assert_eq!(OutputMode::Cli.render(&StatsView(&stats())), expected);
        let idle = Stats {
            quantum_ns: 10_000_000,
            ..Default::default()
        };
        let text = OutputMode::Cli.render(&StatsView(&idle));
        assert!(
            text.ends_with(
                "switches: 0 reported, 0 dropped\nslice table: none in force; quantum 10ms\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(0, false), "0ns");
        assert_eq!(fmt_ns(850, false), "850ns");
        assert_eq!(fmt_ns(999, true), "+999ns");
        assert_eq!(fmt_ns(1_000, false), "1µs");
        assert_eq!(fmt_ns(12_500, true), "+12.5µs");
        assert_eq!(fmt_ns(12_340, true), "+12.3µs");
        assert_eq!(fmt_ns(40_000, false), "40µs");
        assert_eq!(fmt_ns(123_456, false), "123µs");
        assert_eq!(
            fmt_ns(999_999, false),
            "1ms",
            "rounds up into the next unit"
        );
        assert_eq!(fmt_ns(1_250_000, false), "1.25ms");
        assert_eq!(fmt_ns(-1_500_000, true), "-1.5ms");
        assert_eq!(fmt_ns(100_000_000, false), "100ms");
        assert_eq!(fmt_ns(999_996_000, false), "1s");
        assert_eq!(fmt_ns(-2_000_000_000, true), "-2s");
        assert_eq!(fmt_ns(12_345_000_000, false), "12.3s");
        assert_eq!(fmt_ns(1_234_000_000_000, false), "1234s");
        assert_eq!(fmt_ns(i64::MIN, true), "-9223372037s");
        assert_eq!(fmt_duration_ns(0), "0s");
        assert_eq!(fmt_duration_ns(-5), "0s");
        assert_eq!(fmt_duration_ns(850_000_000), "850ms");
        assert_eq!(fmt_duration_ns(59_990_000_000), "60s");
        assert_eq!(fmt_duration_ns(60_000_000_000), "1m00s");
        assert_eq!(fmt_duration_ns(245_000_000_000), "4m05s");
        assert_eq!(fmt_duration_ns(3_723_900_000_000), "1h02m03s");
        assert_eq!(fmt_time_ns(0), "-");
        assert_eq!(fmt_time_ns(1), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            fmt_time_ns(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(
            shell_join(&["a".into(), "".into(), "it's".into()]),
            "a '' 'it'\\''s'"
        );
    }
}
