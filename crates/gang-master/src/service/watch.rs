//! `JobService.Watch`: a snapshot of the jobs a watch covers, then their changes.
//!
//! A watch of one job (`job_id` set) starts with that job's current state and ends after
//! its final event (at once if it has already ended), as `kubectl get --watch` on one
//! object does with `--watch-only` off. A watch of every job starts with each queued,
//! starting or running job the caller may see, then follows every change. Snapshot events
//! carry `snapshot = true`.

use std::collections::HashMap;

use gang_core::JobId;
use gang_proto::v1;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use crate::actor::{Cmd, Handle};
use crate::job::State;
use crate::service::convert;
use crate::state::events::{Caller, ListFilter};
use crate::state::views::JobView;

/// Where a state is in a job's life: states only move forward, so an event that is behind
/// the one already sent for its job is one from before the snapshot.
fn progress(s: State) -> u8 {
    match s {
        State::Queued => 0,
        State::Starting => 1,
        State::Running => 2,
        _ => 3,
    }
}

/// The snapshot, taken after subscribing to `events` so that no change is missed: a
/// change between the subscription and the snapshot arrives twice, and the older copy
/// is dropped by `progress`.
pub async fn start(
    handle: &Handle,
    caller: Caller,
    only: Option<JobId>,
) -> Result<mpsc::Receiver<Result<v1::JobEvent, Status>>, Status> {
    let events = handle.events();
    let snapshot = match only {
        // An unknown job, or another user's, is refused now rather than watched forever.
        Some(id) => {
            let c = caller.clone();
            vec![handle.call(|tx| Cmd::GetJob(id, c, tx)).await?]
        }
        None => {
            let filter = ListFilter {
                states: vec![State::Queued, State::Starting, State::Running],
                limit: usize::MAX,
                before: None,
                max_bytes: 0,
            };
            let c = caller.clone();
            let mut jobs = handle.call(|tx| Cmd::ListJobs(filter, c, tx)).await?.views;
            // Oldest first, as they happened.
            jobs.reverse();
            jobs
        }
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(relay(caller, only, snapshot, events, tx));
    Ok(rx)
}

async fn relay(
    caller: Caller,
    only: Option<JobId>,
    snapshot: Vec<JobView>,
    mut events: broadcast::Receiver<JobView>,
    tx: mpsc::Sender<Result<v1::JobEvent, Status>>,
) {
    let event = |job: &JobView, snapshot: bool| {
        Ok(v1::JobEvent {
            job: Some(convert::job_info(job)),
            snapshot,
        })
    };
    let mut sent: HashMap<JobId, u8> = HashMap::new();
    for job in &snapshot {
        if tx.send(event(job, true)).await.is_err() {
            return;
        }
        sent.insert(job.id, progress(job.state()));
        if only.is_some() && job.state().is_final() {
            return;
        }
    }
    loop {
        let job = match events.recv().await {
            Ok(job) => job,
            // A client this far behind has missed changes it cannot get back: say so,
            // as a Kubernetes watch answers "too old resource version", and let it
            // watch again (its new snapshot is the current state).
            Err(broadcast::error::RecvError::Lagged(n)) => {
                let _ = tx
                    .send(Err(Status::aborted(format!(
                        "the watch fell {n} events behind; watch again for a new snapshot"
                    ))))
                    .await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if only.is_some_and(|id| id != job.id) || !caller.may_act_on(job.owner.uid) {
            continue;
        }
        let p = progress(job.state());
        if sent.get(&job.id).is_some_and(|&last| p < last) {
            continue;
        }
        sent.insert(job.id, p);
        if tx.send(event(&job, false)).await.is_err() {
            return;
        }
        if only.is_some() && job.state().is_final() {
            return;
        }
    }
}
