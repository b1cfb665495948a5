//! What `prun` says while its job waits, as srun's "job 12 queued and waiting for
//! resources": after a second in the queue one line with the master's pending reason, and
//! again when the reason changes. The line saying it started comes from the attach stream
//! (its `Started` event), so that a job ending at once still says it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gang_proto::v1::{GetJobRequest, JobInfo, JobState};

use crate::connect;

/// How long a job may wait before prun says so: a job that starts at once says nothing.
pub const FIRST_NOTE: Duration = Duration::from_secs(1);
/// How often the reason is looked at again while the job waits.
const RECHECK: Duration = Duration::from_secs(2);

/// What to print about the job as last seen, given what was said before.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Notes {
    /// The reason said last (`None`: nothing said yet).
    said: Option<String>,
}

impl Notes {
    /// The line to print for `job` now, if any; `Done` once it has left the queue.
    pub fn see(&mut self, prog: &str, job: &JobInfo) -> Seen {
        match job.state() {
            JobState::Queued => {
                let reason = if job.pending_reason.is_empty() {
                    "waiting for its turn".to_string()
                } else {
                    job.pending_reason.clone()
                };
                if self.said.as_deref() == Some(reason.as_str()) {
                    return Seen::Waiting(None);
                }
                let line = format!("{prog}: job {} queued: {reason}", job.id);
                self.said = Some(reason);
                Seen::Waiting(Some(line))
            }
            _ => Seen::Done,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    Waiting(Option<String>),
    /// It left the queue.
    Done,
}

/// Watch the job in the background until it leaves the queue, printing [`Notes`] on stderr
/// and setting `said` once it has. The caller aborts the task when the job ends (a lost
/// master only ends the watch).
pub fn spawn(
    prog: &'static str,
    master: String,
    job_id: u64,
    said: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(FIRST_NOTE).await;
        let Ok(mut client) = connect::job_client(&master).await else {
            return;
        };
        let mut notes = Notes::default();
        loop {
            let Ok(job) = client.get_job(GetJobRequest { job_id }).await else {
                return;
            };
            match notes.see(prog, &job.into_inner()) {
                Seen::Waiting(line) => {
                    if let Some(line) = line {
                        said.store(true, Ordering::Relaxed);
                        eprintln!("{line}");
                    }
                }
                Seen::Done => return,
            }
            tokio::time::sleep(RECHECK).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, reason: &str) -> JobInfo {
        JobInfo {
            id: 12,
            state: state as i32,
            pending_reason: reason.into(),
            submesh: Some(gang_proto::v1::Submesh {
                x: 0,
                y: 1,
                w: 2,
                h: 1,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn says_the_reason_once_each_change() {
        let mut n = Notes::default();
        let drained = job(JobState::Queued, "waiting for node (1,0): drained");
        assert_eq!(
            n.see("prun", &drained),
            Seen::Waiting(Some(
                "prun: job 12 queued: waiting for node (1,0): drained".into()
            ))
        );
        assert_eq!(n.see("prun", &drained), Seen::Waiting(None));
        assert_eq!(
            n.see("prun", &job(JobState::Queued, "resources")),
            Seen::Waiting(Some("prun: job 12 queued: resources".into()))
        );
        assert_eq!(n.see("prun", &job(JobState::Running, "")), Seen::Done);
    }

    #[test]
    fn a_job_that_left_the_queue_ends_the_watch() {
        let mut n = Notes::default();
        assert_eq!(n.see("prun", &job(JobState::Running, "")), Seen::Done);
        assert_eq!(n.see("prun", &job(JobState::Failed, "")), Seen::Done);
    }
}
