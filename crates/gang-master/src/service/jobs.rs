//! `JobService`: submit, cancel, query, watch, and attach to a job's stdio.

use std::pin::Pin;
use std::sync::Arc;

use gang_core::JobId;
use gang_proto::v1::{self, job_service_server::JobService};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use crate::actor::{Cmd, Handle};
use crate::agents::AgentPool;
use crate::auth::Authenticator;
use crate::error::MasterError;
use crate::output::{Cursor, OutputHub, READ_MAX};
use crate::service::attach_slots::{AttachSlot, AttachSlots};
use crate::service::{convert, watch};
use crate::state::events::{Caller, JobUpdate};
use crate::state::views::{Coord, JobView, Rank0};

pub struct Jobs {
    pub handle: Handle,
    pub output: Arc<OutputHub>,
    pub agents: Arc<AgentPool>,
    pub auth: Arc<Authenticator>,
    pub attaches: Arc<AttachSlots>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Attach responses queued per stream ahead of the client: with pieces of at most
/// `READ_MAX` bytes, the bound on what an unread stream holds in the master (beside what
/// tonic is encoding and h2 has buffered beyond the client's window, about a piece each).
const ATTACH_QUEUE: usize = 4;
/// How often an attach stream looks at its job's launch progress while it starts.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl JobService for Jobs {
    async fn submit(
        &self,
        req: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let job = convert::new_job(req.into_inner(), &caller)?;
        let view = self
            .handle
            .call(|tx| Cmd::Submit(Box::new(job), tx))
            .await?;
        Ok(Response::new(v1::SubmitResponse {
            array_tasks: view.array_tasks,
            job: Some(convert::job_info(&view)),
        }))
    }

    async fn update_job(
        &self,
        req: Request<v1::UpdateJobRequest>,
    ) -> Result<Response<v1::UpdateJobResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let r = req.into_inner();
        let update = JobUpdate {
            job: JobId(r.job_id),
            hold: r.hold,
            time_limit_s: r.time_limit_s,
            name: r.name,
            end_with: None,
        };
        let view = self
            .handle
            .call(|tx| Cmd::UpdateJob(update, caller, tx))
            .await?;
        Ok(Response::new(v1::UpdateJobResponse {
            job: Some(convert::job_info(&view)),
        }))
    }

    async fn end_allocation(
        &self,
        req: Request<v1::EndAllocationRequest>,
    ) -> Result<Response<v1::EndAllocationResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let r = req.into_inner();
        let update = JobUpdate {
            job: JobId(r.job_id),
            hold: None,
            time_limit_s: None,
            name: None,
            end_with: Some(r.exit_code),
        };
        let view = self
            .handle
            .call(|tx| Cmd::UpdateJob(update, caller, tx))
            .await?;
        Ok(Response::new(v1::EndAllocationResponse {
            job: Some(convert::job_info(&view)),
        }))
    }

    async fn cancel(
        &self,
        req: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let r = req.into_inner();
        convert::check_stated_uid(r.uid, &caller)?;
        let view = self
            .handle
            .call(|tx| Cmd::Cancel(JobId(r.job_id), caller, tx))
            .await?;
        Ok(Response::new(v1::CancelResponse {
            job: Some(convert::job_info(&view)),
        }))
    }

    async fn get_job(
        &self,
        req: Request<v1::GetJobRequest>,
    ) -> Result<Response<v1::JobInfo>, Status> {
        let caller = self.auth.caller(&req)?;
        let id = JobId(req.into_inner().job_id);
        let view = self.handle.call(|tx| Cmd::GetJob(id, caller, tx)).await?;
        Ok(Response::new(convert::job_info(&view)))
    }

    async fn list_jobs(
        &self,
        req: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let caller = self.auth.caller(&req)?;
        let filter = convert::list_filter(req.into_inner())?;
        let listed = self
            .handle
            .call(|tx| Cmd::ListJobs(filter, caller, tx))
            .await?;
        Ok(Response::new(convert::list_page(
            &listed.views,
            listed.more,
        )))
    }

    type WatchStream = Boxed<v1::JobEvent>;

    async fn watch(
        &self,
        req: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = self.auth.caller(&req)?;
        let only = Some(req.into_inner().job_id)
            .filter(|&id| id != 0)
            .map(JobId);
        let rx = watch::start(&self.handle, caller, only).await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type AttachStream = Boxed<v1::AttachResponse>;

    async fn attach(
        &self,
        req: Request<Streaming<v1::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let caller = self.auth.caller(&req)?;
        // Counted from here to the end of the relay: a stream that is never read holds its
        // slot until its client goes.
        let slot = self.attaches.take(&caller).inspect_err(|_| {
            self.metrics.attaches_refused.inc();
        })?;
        let mut inbound = req.into_inner();
        let first = inbound.message().await?.ok_or_else(|| {
            MasterError::Invalid("the attach stream ended before naming a job".into())
        })?;
        let id = JobId(first.job_id);
        // Subscribe before looking at the job, so its final event cannot slip between.
        let events = self.handle.events();
        let rank0 = self.handle.rank0_started();
        let stdin_events = self.handle.events();
        let c = caller.clone();
        let info = self.handle.call(|tx| Cmd::GetJob(id, c, tx)).await?;
        let (tx, rx) = mpsc::channel(ATTACH_QUEUE);
        let follow = !first.no_follow;
        // A reader of the output so far sends no stdin: nothing may wait on rank 0 for it.
        if follow {
            tokio::spawn(forward_stdin(
                self.handle.clone(),
                self.agents.clone(),
                id,
                (rank0, stdin_events),
                first,
                inbound,
            ));
        }
        tokio::spawn(relay_output(
            (self.handle.clone(), self.agents.clone()),
            self.output.clone(),
            (id, caller, follow),
            info,
            events,
            (tx, slot),
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Output log from the start, then live, then the final state. Without `live`, only
/// the log as it is now (and the final state if the job has ended).
async fn relay_output(
    (handle, agents): (Handle, Arc<AgentPool>),
    hub: Arc<OutputHub>,
    (id, caller, live): (JobId, Caller, bool),
    info: JobView,
    mut events: broadcast::Receiver<JobView>,
    (tx, _slot): (mpsc::Sender<Result<v1::AttachResponse, Status>>, AttachSlot),
) {
    use v1::attach_response::Event;
    let send = |e: Event| {
        let tx = tx.clone();
        async move {
            tx.send(Ok(v1::AttachResponse { event: Some(e) }))
                .await
                .is_ok()
        }
    };
    let mut follow = match hub.follow(id.0) {
        Ok(f) => f,
        Err(e) => {
            let _ = tx.send(Err(log_error(id, e))).await;
            return;
        }
    };
    let mut sent = Cursor::default();
    let mut finished = info.state().is_final().then(|| info.clone());
    let mut started = info.state() == crate::job::State::Running;
    if started && !send(Event::Started(convert::job_info(&info))).await {
        return;
    }
    let mut deadlocked = info.deadlock.is_some();
    if deadlocked && !send(Event::Deadlocked(convert::job_info(&info))).await {
        return;
    }
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    let mut said = None;
    loop {
        let len = *follow.borrow_and_update();
        match relay_log(&hub, id, &mut sent, len, &tx).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let _ = tx.send(Err(log_error(id, e))).await;
                return;
            }
        }
        if let Some(f) = finished.take() {
            // Agents push a rank's output before reporting its exit: the log is complete.
            let len = *follow.borrow();
            if !matches!(relay_log(&hub, id, &mut sent, len, &tx).await, Ok(true)) {
                return;
            }
            send(Event::Finished(convert::job_info(&f))).await;
            return;
        }
        if !live {
            return;
        }
        tokio::select! {
            r = follow.changed() => if r.is_err() { return },
            _ = progress.tick(), if !started && finished.is_none() => {
                if let Some(p) = progress_since(&agents, id, &mut said)
                    && !send(Event::Progress(p)).await
                {
                    return;
                }
            }
            e = events.recv() => match e {
                Ok(j) if j.id == id => {
                    if !deadlocked && j.deadlock.is_some() {
                        deadlocked = true;
                        if !send(Event::Deadlocked(convert::job_info(&j))).await {
                            return;
                        }
                    }
                    if j.state().is_final() {
                        finished = Some(j);
                    } else if !started && j.state() == crate::job::State::Running {
                        started = true;
                        if !send(Event::Started(convert::job_info(&j))).await {
                            return;
                        }
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let c = caller.clone();
                    match handle.call(|t| Cmd::GetJob(id, c, t)).await {
                        Ok(j) if j.state().is_final() => finished = Some(j),
                        Ok(_) => {}
                        Err(_) => return,
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

fn log_error(id: JobId, e: std::io::Error) -> Status {
    Status::from(MasterError::Output {
        job: id.0,
        source: e,
    })
}

/// The launch's progress, if it changed since `said` (then remembered there).
fn progress_since(
    agents: &AgentPool,
    id: JobId,
    said: &mut Option<crate::actor::progress::Progress>,
) -> Option<v1::LaunchProgress> {
    let now = agents.progress.get(id);
    let p = now.filter(|_| now != *said)?;
    *said = now;
    Some(convert::launch_progress(p))
}

/// Send the log from `sent` up to `len`, a piece of at most `READ_MAX` bytes at a time, read
/// from the file only when the stream has room for it: a reader that does not read holds
/// the relay here with a piece or two, never the log in the master's memory. `Ok(false)`:
/// the client is gone.
async fn relay_log(
    hub: &OutputHub,
    id: JobId,
    sent: &mut Cursor,
    len: u64,
    tx: &mpsc::Sender<Result<v1::AttachResponse, Status>>,
) -> std::io::Result<bool> {
    use v1::attach_response::Event;
    while sent.record < len {
        // Wait for room before reading, so nothing is read ahead of the client.
        let Ok(permit) = tx.reserve().await else {
            return Ok(false);
        };
        let before = sent.position();
        let chunks = hub.read(id.0, sent, len, READ_MAX)?;
        if sent.position() == before {
            return Err(std::io::Error::other(format!(
                "the output log is damaged at byte {}",
                sent.record
            )));
        }
        let mut permit = Some(permit);
        for c in chunks {
            let e = Ok(v1::AttachResponse {
                event: Some(Event::Output(c)),
            });
            match permit.take() {
                Some(p) => {
                    p.send(e);
                }
                None => {
                    if tx.send(e).await.is_err() {
                        return Ok(false);
                    }
                }
            }
        }
    }
    Ok(true)
}

/// Where rank 0 runs (node, agent address), once it runs; `None` once the job has ended
/// without it.
async fn rank0_address(
    handle: &Handle,
    id: JobId,
    (mut started, mut events): (
        broadcast::Receiver<(JobId, Coord, String)>,
        broadcast::Receiver<JobView>,
    ),
) -> Option<(Coord, String)> {
    use broadcast::error::RecvError;
    loop {
        // Both receivers were subscribed before this query: nothing can slip between.
        match handle.call(|t| Cmd::Rank0(id, t)).await {
            Ok(Rank0::Running(node, addr)) => return Some((node, addr)),
            Ok(Rank0::NotYet) => {}
            Ok(Rank0::Ended) | Err(_) => return None,
        }
        // Ask again only when something about this job happened (or we lost track).
        loop {
            tokio::select! {
                r = started.recv() => match r {
                    Ok((j, node, addr)) if j == id => return Some((node, addr)),
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return None,
                },
                e = events.recv() => match e {
                    Ok(j) if j.id == id => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

/// Stdin from the client to rank 0, once rank 0 runs.
async fn forward_stdin(
    handle: Handle,
    agents: Arc<AgentPool>,
    id: JobId,
    watch: (
        broadcast::Receiver<(JobId, Coord, String)>,
        broadcast::Receiver<JobView>,
    ),
    first: v1::AttachRequest,
    mut inbound: Streaming<v1::AttachRequest>,
) {
    let Some((node, addr)) = rank0_address(&handle, id, watch).await else {
        return;
    };
    let Ok(mut client) = agents.client(node, &addr) else {
        return;
    };
    let mut next = Some(first);
    loop {
        let msg = match next.take() {
            Some(m) => m,
            None => match inbound.message().await {
                Ok(Some(m)) => m,
                _ => return,
            },
        };
        if msg.stdin.is_empty() && !msg.stdin_eof {
            continue;
        }
        let req = v1::StdinRequest {
            job_id: id.0,
            data: msg.stdin,
            eof: msg.stdin_eof,
        };
        if let Err(s) = client.stdin(req).await {
            debug!(job = %id, error = %s.message(), "stdin not delivered");
            return;
        }
        if msg.stdin_eof {
            return;
        }
    }
}
