//! `gangctl jobs`, as squeue shows jobs: a step named `2.1` under its allocation, an array
//! task `17_10`, and the queued tasks of an array that wait together (for the same reason,
//! or held by the same user) on one compact line, `5_[6-20%4]` (the waiting indices, and
//! the array's limit of tasks at once); tasks that run or have ended, a line each.

use gang_proto::v1::{JobInfo, JobState};

use crate::args::gang_mode;
use crate::output::View;
use crate::output::format::{
    dash, fmt_indices, fmt_job_run, fmt_limit, fmt_list, fmt_submesh, job_label, job_name,
    job_shape, table,
};
use crate::output::json::JobJson;
use crate::output::views::slice_places;

/// The jobs in their order, each allocation's steps (those listed) moved right after it
/// in step order; steps whose allocation is not listed stay where they are.
pub fn steps_after_allocations(jobs: Vec<JobInfo>) -> Vec<JobInfo> {
    let listed: std::collections::HashSet<u64> = jobs.iter().map(|j| j.id).collect();
    let under = |j: &JobInfo| j.allocation_id != 0 && listed.contains(&j.allocation_id);
    let (steps, rest): (Vec<JobInfo>, Vec<JobInfo>) = jobs.into_iter().partition(under);
    let mut out = Vec::with_capacity(steps.len() + rest.len());
    for j in rest {
        let id = j.id;
        out.push(j);
        let mut mine: Vec<&JobInfo> = steps.iter().filter(|s| s.allocation_id == id).collect();
        mine.sort_by_key(|s| (s.step, s.id));
        out.extend(mine.into_iter().cloned());
    }
    out
}

/// A line of `gangctl jobs`: a job, or queued tasks of one array waiting together.
enum Line<'a> {
    Job(&'a JobInfo),
    Waiting(Vec<&'a JobInfo>),
}

/// What queued tasks of an array share when they wait together: the array, who holds
/// them and whether an admin, and why they wait.
type Together<'a> = (u64, &'a str, bool, &'a str);

/// What queued tasks must share to wait together: their array, who holds them, and
/// (unless held: the master's text names each task) why they wait.
fn waits_with(j: &JobInfo) -> Option<Together<'_>> {
    (j.state() == JobState::Queued && j.array_job_id != 0 && j.array_task_id.is_some()).then(|| {
        let why = if j.held_by.is_empty() {
            j.pending_reason.as_str()
        } else {
            ""
        };
        (j.array_job_id, j.held_by.as_str(), j.held_by_admin, why)
    })
}

/// The lines, in the jobs' order; a compact line where its first task was.
fn lines(jobs: &[JobInfo]) -> Vec<Line<'_>> {
    let mut out: Vec<Line> = Vec::new();
    let mut groups: Vec<(Option<Together>, usize)> = Vec::new();
    for j in jobs {
        let key = waits_with(j);
        let at = key.and_then(|k| groups.iter().find(|g| g.0 == Some(k)).map(|g| g.1));
        match at {
            Some(i) => {
                if let Line::Job(first) = out[i] {
                    out[i] = Line::Waiting(vec![first]);
                }
                if let Line::Waiting(v) = &mut out[i] {
                    v.push(j);
                }
            }
            None => {
                groups.push((key, out.len()));
                out.push(Line::Job(j));
            }
        }
    }
    for l in &mut out {
        if let Line::Waiting(v) = l {
            v.sort_by_key(|t| t.id);
        }
    }
    out
}

/// `5_[6-20%4]`: the array, the indices, the limit if any.
fn compact_label(tasks: &[&JobInfo], with_limit: bool) -> String {
    let first = tasks[0];
    let indices: Vec<u32> = tasks.iter().filter_map(|t| t.array_task_id).collect();
    let limit = match first.array_throttle {
        n if n > 0 && with_limit => format!("%{n}"),
        _ => String::new(),
    };
    format!("{}_[{}{limit}]", first.array_job_id, fmt_indices(&indices))
}

/// Why the tasks of a compact line wait: the master's reason, but a hold names the line
/// (`gangctl release 5_[6-20]`) where the master's names each task.
fn compact_reason(tasks: &[&JobInfo]) -> String {
    let first = tasks[0];
    match (first.held_by.as_str(), first.held_by_admin) {
        ("", _) => first.pending_reason.clone(),
        (by, true) => format!("held by admin {by}"),
        (by, false) => format!(
            "held by {by} (gangctl release {})",
            compact_label(tasks, false)
        ),
    }
}

fn compact_json(tasks: &[&JobInfo]) -> JobJson {
    let mut j = JobJson::from(tasks[0]);
    j.job_id = compact_label(tasks, true);
    j.array_task_id = None;
    j.pending_reason = compact_reason(tasks);
    j.array_task_ids = tasks.iter().filter_map(|t| t.array_task_id).collect();
    j.task_job_ids = tasks.iter().map(|t| t.id).collect();
    j
}

/// The row of a job, or (`id`, `reason` given) of a compact line.
fn row(j: &JobInfo, id: String, reason: Option<String>) -> Vec<String> {
    let spec = j.spec.clone().unwrap_or_default();
    let placed = reason.is_none();
    vec![
        id,
        dash(&j.user),
        j.state().label().to_string(),
        dash(&spec.shape),
        dash(&job_shape(j)),
        // squeue's NODELIST(REASON): where it runs, else why it waits.
        match (j.submesh, reason.as_deref().unwrap_or(&j.pending_reason)) {
            (Some(s), _) if placed => fmt_submesh(&s),
            (_, "") => "-".into(),
            (_, why) => format!("({why})"),
        },
        fmt_list(slice_places(j)),
        j.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        fmt_job_run(j),
        fmt_limit(spec.time_limit_s),
        gang_mode::label(j.gang()).to_string(),
        dash(&job_name(j)),
    ]
}

/// `gangctl jobs`: a table, or a JSON array of jobs (a compact line: one object, see
/// [`JobJson`]'s `array_task_ids`).
pub struct JobsView<'a>(pub &'a [JobInfo]);

impl View for JobsView<'_> {
    type Json = Vec<JobJson>;

    fn json(&self) -> Vec<JobJson> {
        lines(self.0)
            .into_iter()
            .map(|l| match l {
                Line::Job(j) => JobJson::from(j),
                Line::Waiting(tasks) => compact_json(&tasks),
            })
            .collect()
    }

    fn cli(&self) -> String {
        let rows = lines(self.0)
            .into_iter()
            .map(|l| match l {
                Line::Job(j) => row(j, job_label(j), None),
                Line::Waiting(tasks) => row(
                    tasks[0],
                    compact_label(&tasks, true),
                    Some(compact_reason(&tasks)),
                ),
            })
            .collect();
        table(
            &[
                "ID",
                "USER",
                "STATE",
                "ASKED",
                "SHAPE",
                "SUBMESH(REASON)",
                "SLICES",
                "EXIT",
                "RUN",
                "LIMIT",
                "GANG",
                "NAME",
            ],
            rows,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputMode;
    use crate::output::fixtures::{failed_job, queued_job, running_job};

    #[test]
    fn jobs_json_is_an_array() {
        let jobs = vec![running_job(), queued_job()];
        let text = OutputMode::Json.render(&JobsView(&jobs));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[1]["id"], 13);
        assert_eq!(v[0]["asked"], "8");
        assert_eq!(v[0]["shape"], "4x2");
        assert_eq!(v[0]["time_limit_s"], 600);
        assert_eq!(v[1]["pending_reason"], "waiting for node (1,0): drained");
        let empty = OutputMode::Json.render(&JobsView(&[]));
        assert_eq!(empty.trim(), "[]");
    }

    #[test]
    fn jobs_table() {
        let jobs = vec![running_job(), queued_job(), failed_job()];
        let text = OutputMode::Cli.render(&JobsView(&jobs));
        let expected = "\
ID  USER   STATE    ASKED  SHAPE  SUBMESH(REASON)                    SLICES  EXIT  RUN       LIMIT  GANG      NAME
12  alice  running  8      4x2    4x2@(0,0)                          0,2     -     12.3s     10:00  stop      ./a.out
13  bob    queued   3x3    3x3    (waiting for node (1,0): drained)  -       -     -         -      default   big one
9   carol  failed   2x1    2x1    2x1@(2,3)                          -       1     1h02m03s  -      priority  false
";
        assert_eq!(text, expected);
    }

    /// Array 5 of tasks 1-20 (ids 5 to 24), at most 4 at once: tasks 1-4 run, the others
    /// wait, newest first as the master lists them; 7 held apart by its user.
    fn array() -> Vec<JobInfo> {
        (1..=20u32)
            .rev()
            .map(|t| {
                let mut j = queued_job();
                j.id = 4 + u64::from(t);
                j.array_job_id = 5;
                j.array_task_id = Some(t);
                j.array_throttle = 4;
                j.pending_reason = "array 5 runs at most 4 tasks at once".into();
                if t <= 4 {
                    j.state = JobState::Running as i32;
                    j.pending_reason.clear();
                }
                if t == 7 {
                    j.held_by = "bob".into();
                    j.pending_reason = "held by bob (gangctl release 11)".into();
                }
                j
            })
            .collect()
    }

    #[test]
    fn an_arrays_waiting_tasks_are_one_line() {
        let text = OutputMode::Cli.render(&JobsView(&array()));
        let ids: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(ids, ["5_[5-6,8-20%4]", "5_7", "5_4", "5_3", "5_2", "5_1"]);
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .contains("(array 5 runs at most 4 tasks at once)"),
            "{text}"
        );
        let v = serde_json::to_value(JobsView(&array()).json()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 6);
        let line = &v[0];
        assert_eq!(line["job_id"], "5_[5-6,8-20%4]");
        assert_eq!(line["array_job_id"], 5);
        assert_eq!(line["array_throttle"], 4);
        assert_eq!(line["id"], 9, "its first task's id");
        let want: Vec<u32> = [5, 6].into_iter().chain(8..=20).collect();
        assert_eq!(line["array_task_ids"], serde_json::json!(want));
        assert_eq!(line["task_job_ids"][0], 9);
        assert!(line.get("array_task_id").is_none(), "{line}");
        assert_eq!(v[1]["job_id"], "5_7");
        assert_eq!(v[1]["parent"], 5);
        assert_eq!(v[1]["array_task_id"], 7);
    }

    #[test]
    fn held_tasks_wait_together_and_are_released_together() {
        let mut tasks: Vec<JobInfo> = array()
            .into_iter()
            .filter(|t| t.state() == JobState::Queued)
            .collect();
        for t in &mut tasks {
            t.held_by = "bob".into();
            t.pending_reason = format!("held by bob (gangctl release {})", t.id);
        }
        let text = OutputMode::Cli.render(&JobsView(&tasks));
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.contains("5_[5-20%4]")
                && text.contains("(held by bob (gangctl release 5_[5-20]))"),
            "{text}"
        );
    }

    #[test]
    fn steps_follow_their_allocation() {
        let job = |id, alloc, step| JobInfo {
            id,
            allocation_id: alloc,
            step,
            ..Default::default()
        };
        // Newest first, as listed: steps 2.1 (5) and 2.0 (3), job 4 between them.
        let listed = vec![
            job(5, 2, Some(1)),
            job(4, 0, None),
            job(3, 2, Some(0)),
            job(2, 0, None),
            job(9, 8, Some(0)),
        ];
        let order: Vec<String> = steps_after_allocations(listed)
            .iter()
            .map(job_label)
            .collect();
        assert_eq!(order, ["4", "2", "2.0", "2.1", "8.0"]);
    }
}
