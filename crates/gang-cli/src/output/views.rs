//! The views `gangctl` prints: one per command result, each with its text for people and
//! its JSON shape (from [`super::json`]).

use gang_proto::v1::{JobInfo, ListNodesResponse, Matrix, NodeInfo, Quantiles, Stats};

use crate::output::View;
use crate::output::format::{dash, fmt_list, fmt_ns, job_label, table};
use crate::output::json::{JobJson, MatrixJson, NodeJson, NodesJson, StatsJson};
use crate::output::matrix_view;

/// The job's slices as people see them: by place (0 to MPL-1) from a master that says,
/// else its slice ids.
pub(super) fn slice_places(j: &JobInfo) -> &[u32] {
    if j.slice_rows.is_empty() {
        &j.slices
    } else {
        &j.slice_rows
    }
}

/// An error of `PROG` (`gangctl`, `prun`): `PROG: MESSAGE`, or `{"code","message"}`.
pub struct ErrorView<'a> {
    pub prog: &'a str,
    pub code: &'a str,
    pub message: String,
}

impl ErrorView<'_> {
    pub fn of<'a>(prog: &'a str, e: &crate::error::CliError) -> ErrorView<'a> {
        ErrorView {
            prog,
            code: e.code(),
            message: e.to_string(),
        }
    }
}

impl View for ErrorView<'_> {
    type Json = crate::output::json::ErrorJson;

    fn json(&self) -> Self::Json {
        crate::output::json::ErrorJson {
            code: self.code.to_owned(),
            message: self.message.clone(),
        }
    }

    fn cli(&self) -> String {
        format!("{}: {}\n", self.prog, self.message)
    }
}

/// `gangctl cancel`: per job, `cancelled N` if it ended at once (it was queued), else
/// `cancelling N: its ranks are being stopped` (the master holds it running until they
/// are gone); or a JSON array of the jobs as the master holds them after the cancel.
pub struct CancelledView<'a>(pub &'a [JobInfo]);

impl View for CancelledView<'_> {
    type Json = Vec<JobJson>;

    fn json(&self) -> Vec<JobJson> {
        self.0.iter().map(JobJson::from).collect()
    }

    fn cli(&self) -> String {
        self.0
            .iter()
            .map(|j| match j.state() {
                gang_proto::v1::JobState::Cancelled => format!("cancelled {}\n", job_label(j)),
                _ => format!("cancelling {}: its ranks are being stopped\n", job_label(j)),
            })
            .collect()
    }
}

/// `gangctl hold/release/update`: `held 12` a line, or the jobs as JSON.
pub struct UpdatedView<'a> {
    pub jobs: &'a [JobInfo],
    pub word: &'static str,
}

impl View for UpdatedView<'_> {
    type Json = Vec<JobJson>;

    fn json(&self) -> Vec<JobJson> {
        self.jobs.iter().map(JobJson::from).collect()
    }

    fn cli(&self) -> String {
        self.jobs
            .iter()
            .map(|j| format!("{} {}\n", self.word, job_label(j)))
            .collect()
    }
}

/// `gangctl nodes`: a table, or `{"mesh_w","mesh_h","nodes":[...]}`.
pub struct NodesView<'a>(pub &'a ListNodesResponse);

impl View for NodesView<'_> {
    type Json = NodesJson;

    fn json(&self) -> NodesJson {
        NodesJson::from(self.0)
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
                        matrix_view::table_label(n.table_seq, n.table_version)
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

/// `gangctl drain`/`resume` of several nodes: a line each, or a JSON array of nodes.
pub struct NodeViews<'a>(pub &'a [NodeInfo]);

impl View for NodeViews<'_> {
    type Json = Vec<NodeJson>;

    fn json(&self) -> Vec<NodeJson> {
        self.0.iter().map(NodeJson::from).collect()
    }

    fn cli(&self) -> String {
        self.0.iter().map(|n| NodeView(n).cli()).collect()
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
        if s.msg_flushed + s.msg_unflushed > 0 {
            out.push_str(&format!(
                "messaging ranks switched out: {} flushed in time, {} not\n",
                s.msg_flushed, s.msg_unflushed
            ));
        }
        out.push_str(&if s.table_version == 0 {
            format!(
                "slice table: none in force; quantum {}\n",
                fmt_ns(s.quantum_ns, false)
            )
        } else {
            format!(
                "slice table: {}, quantum {}\n",
                matrix_view::table_label(s.table_seq, s.table_version),
                fmt_ns(s.quantum_ns, false)
            )
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputMode;
    use crate::output::fixtures::{failed_job, matrix, nodes, queued_job, stats};
    use gang_proto::v1::NodeState;

    #[test]
    fn nodes_table() {
        let text = OutputMode::Cli.render(&NodesView(&nodes()));
        let expected = "\
NODE  STATE    ADDRESS         JOBS  CLOCK-OFFSET    TABLE
0,0   up       127.0.0.1:4000  3,4   -1.25ms ±40µs   v7
1,0   down     -               -     -               -
0,1   up       127.0.0.1:4001  -     +12.3µs ±9.5µs  v6
1,1   drained  127.0.0.1:4002  -     host            v7
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
    fn error_view() {
        let e = crate::error::CliError::Rpc(tonic::Status::failed_precondition(
            "job 1 already completed",
        ));
        let v = ErrorView::of("gangctl", &e);
        assert_eq!(
            OutputMode::Cli.render_compact(&v),
            "gangctl: job 1 already completed\n"
        );
        assert_eq!(
            OutputMode::Json.render_compact(&v),
            "{\"code\":\"FAILED_PRECONDITION\",\"message\":\"job 1 already completed\"}\n"
        );
    }

    #[test]
    fn cancelled_view() {
        let mut queued = queued_job();
        queued.state = gang_proto::v1::JobState::Cancelled as i32;
        let mut running = failed_job();
        running.state = gang_proto::v1::JobState::Running as i32;
        let jobs = vec![running, queued];
        assert_eq!(
            OutputMode::Cli.render(&CancelledView(&jobs)),
            "cancelling 9: its ranks are being stopped\ncancelled 13\n"
        );
    }

    #[test]
    fn matrix_view_draws_or_renders_json_pretty_or_compact() {
        let m = matrix();
        assert_eq!(
            OutputMode::Cli.render(&MatrixView(&m)),
            matrix_view::draw(&m)
        );
        let expected = serde_json::to_value(MatrixJson::from(&m)).unwrap();
        let pretty = OutputMode::Json.render(&MatrixView(&m));
        assert!(pretty.lines().count() > 1);
        let v: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(v, expected);
        let compact = OutputMode::Json.render_compact(&MatrixView(&m));
        assert_eq!(compact.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&compact).unwrap();
        assert_eq!(v, expected);
    }
    #[test]
    fn stats_table() {
        let expected = concat!(
            "                COUNT  P50     P99    MAX     MEAN\n",
            "skew            1200   12.3µs  85µs   1.25ms  15.1µs\n",
            "switch latency  19200  48µs    210µs  3.4ms   61.2µs\n",
            "switch cost     0      -       -      -       -\n",
            "switches: 19200 reported, 3 dropped\n",
            "slice table: v9, quantum 50ms\n",
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
}
