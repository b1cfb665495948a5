//! `gangctl acct`, as sacct: one line per job with the columns asked (`--format`, each with
//! sacct's `%N` width if given), from what the master keeps of every job: wall elapsed,
//! scheduled run time, the nodes, the exit code, the state and reason, the CPU and memory
//! its ranks used. As JSON, one object per job with every column.

use std::collections::BTreeMap;

use gang_proto::v1::JobInfo;
use serde_json::Value;

use super::acct_format::fit;
pub use super::acct_format::{
    COLUMNS, Column, DEFAULT_FORMAT, Field, Format, parse_format, parse_format_arg,
};
use crate::output::View;
use crate::output::format::{fmt_limit, fmt_time_ns, job_name, job_shape, table};

/// Wall time from start to end, or to `now_ns` while it runs; 0 before it started.
pub fn elapsed_ns(j: &JobInfo, now_ns: i64) -> i64 {
    match (j.start_ns, j.end_ns) {
        (0, _) => 0,
        (s, 0) => (now_ns - s).max(0),
        (s, e) => (e - s).max(0),
    }
}

/// The nodes of its submesh as `gangctl drain` takes them: `X0-X1,Y0-Y1`.
pub fn node_list(j: &JobInfo) -> String {
    let Some(s) = j.submesh else {
        return String::new();
    };
    let range = |a: u32, n: u32| {
        if n <= 1 {
            a.to_string()
        } else {
            format!("{a}-{}", a + n - 1)
        }
    };
    format!("{},{}", range(s.x, s.w), range(s.y, s.h))
}

/// The nodes it had (0 before it was placed).
fn node_count(j: &JobInfo) -> u32 {
    j.submesh.map_or(0, |s| s.w * s.h)
}

fn secs(ns: i64) -> u64 {
    u64::try_from(ns / 1_000_000_000).unwrap_or(0)
}

/// As sacct prints a duration: `HH:MM:SS` (`D-HH:MM:SS` past a day).
fn fmt_elapsed(ns: i64) -> String {
    let s = secs(ns);
    let (d, h, m, sec) = (s / 86400, s % 86400 / 3600, s % 3600 / 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{sec:02}")
    } else {
        format!("{h:02}:{m:02}:{sec:02}")
    }
}

/// CPU time as sacct prints it: `MM:SS.mmm` below an hour, else `[D-]HH:MM:SS`.
fn fmt_cpu(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    if s < 3600 {
        format!("{:02}:{:02}.{:03}", s / 60, s % 60, ms % 1000)
    } else {
        fmt_elapsed(i64::try_from(ns).unwrap_or(i64::MAX))
    }
}

/// Bytes with a binary unit, as sacct's MaxRSS (`512K`, `48.2M`, `1.5G`).
fn fmt_bytes(b: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, size) in units {
        if b >= size {
            let v = b as f64 / size as f64;
            return if v >= 100.0 {
                format!("{v:.0}{u}")
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    format!("{b}")
}

fn cell(j: &JobInfo, c: Column, now_ns: i64) -> (String, Value) {
    let spec = j.spec.clone().unwrap_or_default();
    let text_or_dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    match c {
        Column::JobId => (crate::output::format::job_label(j), j.id.into()),
        Column::JobName => (job_name(j), job_name(j).into()),
        Column::User => (j.user.clone(), j.user.clone().into()),
        Column::State => (j.state().label().into(), j.state().label().into()),
        Column::ExitCode => match j.exit_code {
            Some(c) => (c.to_string(), c.into()),
            None => ("-".into(), Value::Null),
        },
        Column::Elapsed => {
            let ns = elapsed_ns(j, now_ns);
            (fmt_elapsed(ns), (ns / 1_000_000).into())
        }
        Column::Run => (fmt_elapsed(j.run_ns), (j.run_ns / 1_000_000).into()),
        Column::TimeLimit => (fmt_limit(spec.time_limit_s), spec.time_limit_s.into()),
        Column::Submit => (fmt_time_ns(j.submit_ns), j.submit_ns.into()),
        Column::Start => (fmt_time_ns(j.start_ns), j.start_ns.into()),
        Column::End => (fmt_time_ns(j.end_ns), j.end_ns.into()),
        Column::NNodes => (node_count(j).to_string(), node_count(j).into()),
        Column::NodeList => (text_or_dash(node_list(j)), node_list(j).into()),
        Column::Shape => (job_shape(j), job_shape(j).into()),
        Column::Reason => {
            let r = if j.reason.is_empty() {
                j.pending_reason.clone()
            } else {
                j.reason.clone()
            };
            (text_or_dash(r.clone()), r.into())
        }
        Column::Array => match j.array_task_id {
            Some(t) if j.array_job_id != 0 => (
                format!("{}_{t}", j.array_job_id),
                format!("{}_{t}", j.array_job_id).into(),
            ),
            _ => ("-".into(), Value::Null),
        },
        Column::Dependency => (
            text_or_dash(spec.dependency.clone()),
            spec.dependency.into(),
        ),
        Column::CpuTime => {
            let ns = elapsed_ns(j, now_ns).saturating_mul(i64::from(node_count(j)));
            (fmt_elapsed(ns), (ns / 1_000_000).into())
        }
        Column::MaxRssNode => match j.usage.filter(|u| u.ranks_measured > 0) {
            Some(gang_proto::v1::JobUsage {
                max_rss_x: Some(x),
                max_rss_y: Some(y),
                ..
            }) => (format!("{x},{y}"), format!("{x},{y}").into()),
            _ => ("-".into(), Value::Null),
        },
        Column::UserCpu | Column::SystemCpu | Column::TotalCpu | Column::MaxRss => {
            // Not measured (no rank has ended, or no node had cgroups for it): unknown, not 0.
            let Some(u) = j.usage.filter(|u| u.ranks_measured > 0) else {
                return ("-".into(), Value::Null);
            };
            let ns = match c {
                Column::UserCpu => u.cpu_user_ns,
                Column::SystemCpu => u.cpu_system_ns,
                Column::TotalCpu => u.cpu_user_ns.saturating_add(u.cpu_system_ns),
                _ => return (fmt_bytes(u.max_rss_bytes), u.max_rss_bytes.into()),
            };
            (fmt_cpu(ns), ns.into())
        }
    }
}

/// How JSON names a job beside its `jobid`: as Slurm does (`job_id`: `12.1`, `17_3`), its
/// allocation or array (`parent`), its step number or task index.
fn names(j: &JobInfo) -> [(&'static str, Value); 4] {
    let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
    [
        ("job_id", crate::output::format::job_label(j).into()),
        ("parent", opt(crate::output::format::job_parent(j))),
        (
            "step",
            opt(j.step.filter(|_| j.allocation_id != 0).map(u64::from)),
        ),
        (
            "array_task_id",
            opt(j
                .array_task_id
                .filter(|_| j.array_job_id != 0)
                .map(u64::from)),
        ),
    ]
}

/// The jobs, with the columns asked (text) or every column (JSON, durations in ms and
/// instants in Unix ns).
pub struct AcctView<'a> {
    pub jobs: &'a [JobInfo],
    pub columns: &'a [Field],
    pub now_ns: i64,
}

impl View for AcctView<'_> {
    type Json = Vec<BTreeMap<&'static str, Value>>;

    fn json(&self) -> Self::Json {
        self.jobs
            .iter()
            .map(|j| {
                COLUMNS
                    .iter()
                    .map(|(name, c, _)| {
                        let key: &'static str = match c {
                            Column::UserCpu => "usercpu_ns",
                            Column::SystemCpu => "systemcpu_ns",
                            Column::TotalCpu => "totalcpu_ns",
                            Column::MaxRss => "maxrss_bytes",
                            Column::Elapsed => "elapsed_ms",
                            Column::CpuTime => "cputime_ms",
                            Column::Run => "run_ms",
                            Column::TimeLimit => "timelimit_s",
                            Column::Submit => "submit_ns",
                            Column::Start => "start_ns",
                            Column::End => "end_ns",
                            _ => name,
                        };
                        (key, cell(j, *c, self.now_ns).1)
                    })
                    .chain(names(j))
                    .collect()
            })
            .collect()
    }

    fn cli(&self) -> String {
        let sized = |f: &Field, text: String, header: bool| match f.width {
            Some(w) => fit(&text, w, header),
            None => text,
        };
        let headers: Vec<String> = self
            .columns
            .iter()
            .map(|f| sized(f, f.column.header(), true))
            .collect();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let rows = self
            .jobs
            .iter()
            .map(|j| {
                self.columns
                    .iter()
                    .map(|f| sized(f, cell(j, f.column, self.now_ns).0, false))
                    .collect()
            })
            .collect();
        table(&headers, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::{JobState, Submesh};

    fn job() -> JobInfo {
        JobInfo {
            id: 7,
            user: "alice".into(),
            state: JobState::Timeout as i32,
            exit_code: Some(124),
            submesh: Some(Submesh {
                x: 2,
                y: 0,
                w: 2,
                h: 1,
            }),
            start_ns: 1_000_000_000,
            end_ns: 3_725_000_000_000 + 1_000_000_000,
            run_ns: 1_800_000_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn widths_as_sacct_pads_and_cuts() {
        let j = JobInfo {
            spec: Some(gang_proto::v1::JobSpec {
                name: "solver-big-run".into(),
                ..Default::default()
            }),
            ..job()
        };
        let v = AcctView {
            jobs: std::slice::from_ref(&j),
            columns: &parse_format("JobID%6,State%-9,JobName%10").unwrap(),
            now_ns: 0,
        };
        // Right justified (N > 0), left (N < 0); a value cut ends in `+`, a header bare.
        assert_eq!(
            v.cli(),
            " JOBID  STATE         JOBNAME\n     7  timeout    solver-bi+\n"
        );
    }

    #[test]
    fn cputime_node_and_names_of_steps_and_tasks() {
        // 01:02:05 on 2 nodes.
        assert_eq!(cell(&job(), Column::CpuTime, 0).0, "02:04:10");
        let long = JobInfo {
            end_ns: 1_000_000_000 + 13 * 3600 * 1_000_000_000,
            ..job()
        };
        assert_eq!(cell(&long, Column::CpuTime, 0).0, "1-02:00:00");
        assert_eq!(cell(&job(), Column::MaxRssNode, 0).0, "-");
        let step = JobInfo {
            allocation_id: 5,
            step: Some(2),
            usage: Some(gang_proto::v1::JobUsage {
                ranks_measured: 1,
                max_rss_x: Some(3),
                max_rss_y: Some(0),
                ..Default::default()
            }),
            ..job()
        };
        assert_eq!(cell(&step, Column::MaxRssNode, 0).0, "3,0");
        assert_eq!(cell(&step, Column::JobId, 0).0, "5.2");
        let v = AcctView {
            jobs: &[step],
            columns: &[],
            now_ns: 0,
        };
        let row = &v.json()[0];
        assert_eq!(
            (&row["jobid"], &row["job_id"], &row["parent"], &row["step"]),
            (&7.into(), &"5.2".into(), &5.into(), &2.into())
        );
        assert_eq!(row["maxrssnode"], "3,0");
        assert_eq!(row["cputime_ms"], 2 * 3_725_000);
    }

    #[test]
    fn cells_read_as_sacct_prints_them() {
        let j = job();
        assert_eq!(node_list(&j), "2-3,0");
        assert_eq!(cell(&j, Column::Elapsed, 0).0, "01:02:05");
        assert_eq!(cell(&j, Column::Run, 0).0, "00:30:00");
        assert_eq!(cell(&j, Column::ExitCode, 0).0, "124");
        assert_eq!(cell(&j, Column::NNodes, 0).0, "2");
        let running = JobInfo { end_ns: 0, ..job() };
        assert_eq!(elapsed_ns(&running, 11_000_000_000), 10_000_000_000);
        let v = AcctView {
            jobs: &[j],
            columns: &parse_format("jobid,state").unwrap(),
            now_ns: 0,
        };
        assert_eq!(v.cli(), "JOBID  STATE\n7      timeout\n");
        assert_eq!(v.json()[0]["elapsed_ms"], 3_725_000);
        assert_eq!(
            v.json()[0]["maxrss_bytes"],
            Value::Null,
            "not measured: null, not 0"
        );
    }

    #[test]
    fn cpu_and_memory_as_sacct_prints_them() {
        let j = JobInfo {
            usage: Some(gang_proto::v1::JobUsage {
                ranks_measured: 2,
                cpu_user_ns: 61_234_000_000,
                cpu_system_ns: 1_000_000_000,
                max_rss_bytes: 50 << 20,
                max_rss_rank: 1,
                ..Default::default()
            }),
            ..job()
        };
        assert_eq!(cell(&j, Column::UserCpu, 0).0, "01:01.234");
        assert_eq!(cell(&j, Column::TotalCpu, 0).0, "01:02.234");
        assert_eq!(cell(&j, Column::MaxRss, 0).0, "50.0M");
        assert_eq!(cell(&job(), Column::MaxRss, 0).0, "-");
        assert_eq!(fmt_bytes(512 << 10), "512K");
        assert_eq!(fmt_cpu(7_200_000_000_000), "02:00:00");
    }
}
