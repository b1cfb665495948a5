//! `gangctl job ID`'s view of one job: `key: value` lines (the lines that apply to few
//! jobs, such as an array task's or a held job's, only when they apply), or one JSON job.

use gang_proto::v1::{JobInfo, JobSpec};

use crate::args::gang_mode;
use crate::output::View;
use crate::output::format::{
    command_text, dash, deadlock_lines, fmt_indices, fmt_job_run, fmt_limit, fmt_list, fmt_ns,
    fmt_output_lost, fmt_submesh, fmt_time_ns, job_label, job_name, job_shape, key_values,
    rank_count,
};
use crate::output::json::JobJson;
use crate::output::views::slice_places;

type Pairs = Vec<(&'static str, String)>;

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
        let mut pairs = common_pairs(j, &spec);
        // Only when they apply: the common case reads as it always did.
        insert_when_set(j, &spec, &mut pairs);
        let mut out = key_values(&pairs);
        if let Some(d) = &j.deadlock {
            out.push_str(&format!(
                "deadlock:   found {}, every rank blocked in a receive, nothing in flight\n{}",
                fmt_time_ns(d.detected_ns),
                deadlock_lines(j, "            ")
            ));
        }
        out
    }
}

/// The lines every job has, in their order.
fn common_pairs(j: &JobInfo, spec: &JobSpec) -> Pairs {
    vec![
        ("id", id_text(j)),
        ("name", dash(&job_name(j))),
        (
            "user",
            format!("{} (uid {}, gid {})", dash(&j.user), j.uid, j.gid),
        ),
        ("state", state_text(j)),
        ("shape", shape_text(j, spec)),
        (
            "submesh",
            j.submesh
                .map(|s| fmt_submesh(&s))
                .unwrap_or_else(|| "-".into()),
        ),
        ("slices", fmt_list(slice_places(j))),
        (
            "exit code",
            j.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        ("reason", dash(&j.reason)),
        ("pending", dash(&j.pending_reason)),
        ("command", command_text(spec)),
        ("cwd", dash(&spec.cwd)),
        ("time limit", time_limit_text(spec)),
        ("run time", fmt_job_run(j)),
        ("gang mode", gang_mode_text(j, spec)),
        (
            "stdin",
            if spec.stdin { "attached" } else { "/dev/null" }.into(),
        ),
        ("submitted", fmt_time_ns(j.submit_ns)),
        ("started", fmt_time_ns(j.start_ns)),
        ("ended", fmt_time_ns(j.end_ns)),
    ]
}

/// `12`; a step or an array task as Slurm names it, and its job id: `12.1 (job 15)`.
fn id_text(j: &JobInfo) -> String {
    match job_label(j) {
        l if l == j.id.to_string() => l,
        l => format!("{l} (job {})", j.id),
    }
}

fn state_text(j: &JobInfo) -> String {
    if j.deadlock.is_some() && j.state() == gang_proto::v1::JobState::Running {
        "running, DEADLOCKED".to_string()
    } else {
        j.state().label().to_string()
    }
}

/// The shape it runs on, and what was asked if that differs (a count rounded up).
fn shape_text(j: &JobInfo, spec: &JobSpec) -> String {
    let shape = job_shape(j);
    if !spec.shape.is_empty() && spec.shape != shape {
        format!("{shape} (asked {})", spec.shape)
    } else {
        dash(&shape)
    }
}

fn time_limit_text(spec: &JobSpec) -> String {
    if spec.time_limit_s == 0 {
        "none".into()
    } else {
        format!("{} ({} s)", fmt_limit(spec.time_limit_s), spec.time_limit_s)
    }
}

fn gang_mode_text(j: &JobInfo, spec: &JobSpec) -> String {
    let mode = gang_mode::label(j.gang());
    if spec.gang() == gang_proto::v1::GangMode::Unspecified {
        format!("{mode} (cluster default)")
    } else {
        mode.to_string()
    }
}

/// Where a line goes after `key` (the end if `key` is not there); `None`: the start.
fn after(pairs: &Pairs, key: &str, missing: usize) -> usize {
    pairs
        .iter()
        .position(|(k, _)| *k == key)
        .map_or(missing, |i| i + 1)
}

/// The lines that apply to few jobs, each at its place: an array task's, a dependency,
/// resource usage, a hold, lost output.
fn insert_when_set(j: &JobInfo, spec: &JobSpec, pairs: &mut Pairs) {
    if j.array_job_id != 0 {
        let task = j.array_task_id.unwrap_or_default();
        let mut text = format!("task {task} of array {}", j.array_job_id);
        // The array's own id: all its tasks, as `gangctl cancel` and `jobs` take them.
        if !j.array_task_indices.is_empty() {
            let limit = match j.array_throttle {
                0 => String::new(),
                n => format!(", at most {n} at once"),
            };
            text.push_str(&format!(
                " (its tasks: {}_[{}]{limit})",
                j.id,
                fmt_indices(&j.array_task_indices)
            ));
        }
        pairs.insert(1, ("array", text));
    }
    if !spec.dependency.is_empty() {
        pairs.insert(
            after(pairs, "pending", 0),
            ("dependency", spec.dependency.clone()),
        );
    }
    insert_usage(j, pairs);
    if !j.held_by.is_empty() {
        let who = if j.held_by_admin {
            format!("{} (an admin)", j.held_by)
        } else {
            j.held_by.clone()
        };
        pairs.insert(after(pairs, "pending", 0), ("held by", who));
    }
    if !j.output_lost.is_empty() {
        pairs.insert(
            after(pairs, "pending", 0),
            ("output lost", fmt_output_lost(&j.output_lost)),
        );
    }
}

/// CPU time and memory after the run time, once any rank was measured.
fn insert_usage(j: &JobInfo, pairs: &mut Pairs) {
    let Some(u) = j.usage.filter(|u| u.ranks_measured > 0) else {
        return;
    };
    let at = after(pairs, "run time", pairs.len());
    pairs.insert(
        at,
        (
            "cpu time",
            format!(
                "{} user, {} system ({} of {} ranks measured)",
                fmt_ns(u.cpu_user_ns as i64, false),
                fmt_ns(u.cpu_system_ns as i64, false),
                u.ranks_measured,
                rank_count(j)
            ),
        ),
    );
    pairs.insert(
        at + 1,
        (
            "max memory",
            format!(
                "{} MiB (rank {})",
                u.max_rss_bytes.div_ceil(1 << 20),
                u.max_rss_rank
            ),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputMode;
    use crate::output::fixtures::{deadlocked_job, running_job};

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
pending:    -
command:    ./a.out -x 'two words'
cwd:        /home/alice
time limit: 10:00 (600 s)
run time:   12.3s
gang mode:  stop (cluster default)
stdin:      attached
submitted:  2023-11-14 22:13:20 UTC
started:    2023-11-14 22:13:21 UTC
ended:      -
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_task_is_named_as_slurm_names_it_and_its_array_names_all() {
        let mut first = running_job();
        first.array_job_id = 12;
        first.array_task_id = Some(1);
        first.array_throttle = 4;
        first.array_task_indices = (1..=20).collect();
        let text = OutputMode::Cli.render(&JobView(&first));
        assert!(text.starts_with("id:         12_1 (job 12)\narray:      task 1 of array 12 (its tasks: 12_[1-20], at most 4 at once)\n"), "{text}");
        let mut step = running_job();
        step.allocation_id = 10;
        step.step = Some(2);
        let text = OutputMode::Cli.render(&JobView(&step));
        assert!(text.starts_with("id:         10.2 (job 12)\n"), "{text}");
    }

    #[test]
    fn a_deadlocked_job_shows_every_ranks_wait() {
        let text = OutputMode::Cli.render(&JobView(&deadlocked_job()));
        assert!(text.contains("state:      running, DEADLOCKED\n"), "{text}");
        assert!(text.ends_with(
            "deadlock:   found 2023-11-14 22:13:23 UTC, every rank blocked in a receive, nothing in flight
            rank 0 on node (0,0) waits for rank 1, tag 7 since 2023-11-14 22:13:22 UTC
            rank 1 on node (1,0) waits for any source, any tag since 2023-11-14 22:13:22 UTC
"
        ), "{text}");
        let prun = crate::output::format::deadlock_report(&deadlocked_job());
        assert!(prun.starts_with("prun: job 12 DEADLOCKED at 2023-11-14 22:13:23 UTC: every rank is blocked in a receive and nothing is in flight (42 messages delivered); it is left running (--on-deadlock report)\nprun:   rank 0 on node (0,0) waits for rank 1, tag 7"), "{prun}");
        let json = OutputMode::Json.render(&JobView(&deadlocked_job()));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["deadlock"]["waits"][1]["source"], -1);
        assert_eq!(v["on_deadlock"], "report");
        let quiet = OutputMode::Json.render(&JobView(&running_job()));
        assert!(!quiet.contains("\"deadlock\""), "{quiet}");
    }
}
