//! How a job's end becomes the exit code of `prun` and `gangctl attach`/`output` (as the
//! shell and `timeout(1)` would say it), and what is printed with it: why it failed,
//! what of its output was lost, where its output files are.

use gang_proto::v1::{JobInfo, JobState};

/// prun's exit status for a job ended by its time limit (`timeout(1)`'s).
pub const TIMEOUT_EXIT: i32 = 124;

/// The exit code for a finished job, printing why it failed or was cancelled: for a
/// failed rank, the master's reason as it is (`rank 2 on node (0,1) exited with code 3`:
/// which rank, where, and its code or signal), unless `quiet`.
pub fn finished_code(prog: &str, job: &JobInfo, quiet: bool) -> i32 {
    let id = job.id;
    let code = job.exit_code.map(clamp_exit);
    match job.state() {
        JobState::Cancelled => {
            eprintln!("{prog}: job {id} cancelled: {}", or_unknown(&job.reason));
            code.unwrap_or(143)
        }
        // One code whatever the ranks' signal, so scripts can tell a job that ran out of
        // time from one that failed; 124 is what `timeout(1)` exits with.
        JobState::Timeout => {
            eprintln!("{prog}: job {id} timed out: {}", or_unknown(&job.reason));
            TIMEOUT_EXIT
        }
        JobState::Completed => code.unwrap_or(0),
        JobState::Failed => match code {
            Some(c) => {
                if !quiet {
                    if job.reason.is_empty() {
                        eprintln!("{prog}: job {id} failed with exit code {c}");
                    } else {
                        eprintln!("{prog}: {}", job.reason);
                    }
                }
                c
            }
            None => {
                eprintln!("{prog}: job {id} failed: {}", or_unknown(&job.reason));
                1
            }
        },
        other => {
            eprintln!(
                "{prog}: job {id} ended in state {}: {}",
                other.label(),
                or_unknown(&job.reason)
            );
            code.unwrap_or(1)
        }
    }
}

/// The exit code of a job `prun` cancelled for signal `by`: a job ended as cancelled
/// after Ctrl-C exits 130, as srun and the shell say it (its ranks' SIGTERM would say
/// 143); after SIGTERM or SIGHUP, and for a job that ended otherwise first, `code`.
pub fn interrupted_code(job: &JobInfo, code: i32, by: Option<i32>) -> i32 {
    if by == Some(libc::SIGINT) && job.state() == JobState::Cancelled {
        128 + libc::SIGINT
    } else {
        code
    }
}

/// Say what of the job's output was lost, if anything was: a job whose output did not all
/// arrive does not end with 0, even if every rank did (the caller's `code` otherwise).
pub fn lost_output_code(prog: &str, job: &JobInfo, code: i32) -> i32 {
    if job.output_lost.is_empty() {
        return code;
    }
    eprintln!(
        "{prog}: job {}: output lost: {} (the node's spool for the job was full while the master was unreachable, or the output passed the master's max_output_bytes)",
        job.id,
        crate::output::format::fmt_output_lost(&job.output_lost)
    );
    if code == 0 { 1 } else { code }
}

/// Where a job's output goes when not through the master (`prun --output/--error`), for
/// the commands that show its output: those streams are in files on the nodes, not here.
pub fn files_note(job: &JobInfo) -> Option<String> {
    let spec = job.spec.as_ref()?;
    match (spec.output.as_str(), spec.error.as_str()) {
        ("", "") => None,
        (o, "") => Some(format!(
            "stdout and stderr go to files {o:?} on the ranks' nodes"
        )),
        ("", e) => Some(format!("stderr goes to files {e:?} on the ranks' nodes")),
        (o, e) => Some(format!(
            "stdout goes to files {o:?}, stderr to {e:?}, on the ranks' nodes"
        )),
    }
}

fn or_unknown(reason: &str) -> &str {
    if reason.is_empty() {
        "no reason given"
    } else {
        reason
    }
}

/// Exit statuses outside 0..=255 cannot be returned as they are; they become 1.
fn clamp_exit(code: i32) -> i32 {
    if (0..=255).contains(&code) { code } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, exit_code: Option<i32>) -> JobInfo {
        JobInfo {
            id: 4,
            state: state as i32,
            exit_code,
            reason: "why".into(),
            ..Default::default()
        }
    }

    #[test]
    fn lost_output_fails_a_job_that_otherwise_succeeded() {
        let mut j = job(JobState::Completed, Some(0));
        assert_eq!(lost_output_code("prun", &j, 0), 0);
        j.output_lost.push(gang_proto::v1::OutputLoss {
            rank: 1,
            stream: gang_proto::v1::Stream::Stdout as i32,
            bytes: 5,
        });
        assert_eq!(lost_output_code("prun", &j, 0), 1);
        assert_eq!(lost_output_code("prun", &j, 3), 3);
    }

    #[test]
    fn ctrl_c_gives_130_for_a_job_it_cancelled() {
        let cancelled = job(JobState::Cancelled, Some(143));
        assert_eq!(interrupted_code(&cancelled, 143, Some(libc::SIGINT)), 130);
        assert_eq!(interrupted_code(&cancelled, 143, Some(libc::SIGTERM)), 143);
        assert_eq!(interrupted_code(&cancelled, 143, None), 143);
        // It ended by itself before the cancel came: its own code.
        let done = job(JobState::Failed, Some(3));
        assert_eq!(interrupted_code(&done, 3, Some(libc::SIGINT)), 3);
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            finished_code("prun", &job(JobState::Completed, Some(0)), true),
            0
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Completed, None), true),
            0
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Failed, Some(3)), true),
            3
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Failed, Some(137)), true),
            137
        );
        assert_eq!(finished_code("prun", &job(JobState::Failed, None), true), 1);
        assert_eq!(
            finished_code("prun", &job(JobState::Cancelled, None), true),
            143
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Cancelled, Some(130)), true),
            130
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Timeout, Some(143)), false),
            124
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Failed, Some(300)), true),
            1
        );
        assert_eq!(
            finished_code("prun", &job(JobState::Failed, Some(-1)), true),
            1
        );
    }
}
