//! `JobService`: submit, cancel, query, watch, and attach to a job's stdio.

use std::pin::Pin;
use std::sync::Arc;

use gang_core::JobId;
use gang_proto::v1::{self, job_service_server::JobService};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use crate::agents::AgentPool;
use crate::output::OutputHub;
use crate::state::{Cmd, Handle};

pub struct Jobs {
    pub handle: Handle,
    pub output: Arc<OutputHub>,
    pub agents: Arc<AgentPool>,
}

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn is_final(info: &v1::JobInfo) -> bool {
    v1::JobState::try_from(info.state).is_ok_and(|s| s.is_final())
}

#[tonic::async_trait]
impl JobService for Jobs {
    async fn submit(
        &self,
        req: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        let job = self
            .handle
            .call(|tx| Cmd::Submit(req.into_inner(), tx))
            .await?;
        Ok(Response::new(v1::SubmitResponse { job: Some(job) }))
    }

    async fn cancel(
        &self,
        req: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelResponse>, Status> {
        let r = req.into_inner();
        let job = self
            .handle
            .call(|tx| Cmd::Cancel(JobId(r.job_id), r.uid, tx))
            .await?;
        Ok(Response::new(v1::CancelResponse { job: Some(job) }))
    }

    async fn get_job(
        &self,
        req: Request<v1::GetJobRequest>,
    ) -> Result<Response<v1::JobInfo>, Status> {
        let id = JobId(req.into_inner().job_id);
        Ok(Response::new(
            self.handle.call(|tx| Cmd::GetJob(id, tx)).await?,
        ))
    }

    async fn list_jobs(
        &self,
        req: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let jobs = self
            .handle
            .call(|tx| Cmd::ListJobs(req.into_inner(), tx))
            .await?;
        Ok(Response::new(v1::ListJobsResponse { jobs }))
    }

    type WatchStream = Boxed<v1::JobEvent>;

    async fn watch(
        &self,
        req: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let only = req.into_inner().job_id;
        let events = tokio_stream::wrappers::BroadcastStream::new(self.handle.events());
        let stream = events.filter_map(move |e| match e {
            Ok(job) if only == 0 || job.id == only => Some(Ok(v1::JobEvent { job: Some(job) })),
            _ => None,
        });
        Ok(Response::new(Box::pin(stream)))
    }

    type AttachStream = Boxed<v1::AttachResponse>;

    async fn attach(
        &self,
        req: Request<Streaming<v1::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let mut inbound = req.into_inner();
        let first = inbound.message().await?.ok_or_else(|| {
            Status::invalid_argument("the attach stream ended before naming a job")
        })?;
        let id = JobId(first.job_id);
        // Subscribe before looking at the job, so its final event cannot slip between.
        let events = self.handle.events();
        let info = self.handle.call(|tx| Cmd::GetJob(id, tx)).await?;
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(forward_stdin(
            self.handle.clone(),
            self.agents.clone(),
            id,
            first,
            inbound,
        ));
        tokio::spawn(relay_output(
            self.handle.clone(),
            self.output.clone(),
            id,
            info,
            events,
            tx,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Output log from the start, then live, then the final state.
async fn relay_output(
    handle: Handle,
    hub: Arc<OutputHub>,
    id: JobId,
    info: v1::JobInfo,
    mut events: broadcast::Receiver<v1::JobInfo>,
    tx: mpsc::Sender<Result<v1::AttachResponse, Status>>,
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
            let _ = tx
                .send(Err(Status::internal(format!(
                    "output log of job {id}: {e}"
                ))))
                .await;
            return;
        }
    };
    let mut sent = 0u64;
    let mut finished = is_final(&info).then_some(info.clone());
    let mut started = info.state == v1::JobState::Running as i32;
    if started && !send(Event::Started(info)).await {
        return;
    }
    loop {
        let len = *follow.borrow_and_update();
        match hub.read(id.0, sent, len) {
            Ok(chunks) => {
                for c in chunks {
                    if !send(Event::Output(c)).await {
                        return;
                    }
                }
                sent = len;
            }
            Err(e) => {
                let _ = tx
                    .send(Err(Status::internal(format!(
                        "output log of job {id}: {e}"
                    ))))
                    .await;
                return;
            }
        }
        if let Some(f) = finished.take() {
            // Agents push a rank's output before reporting its exit: the log is complete.
            let len = *follow.borrow();
            for c in hub.read(id.0, sent, len).unwrap_or_default() {
                if !send(Event::Output(c)).await {
                    return;
                }
            }
            send(Event::Finished(f)).await;
            return;
        }
        tokio::select! {
            r = follow.changed() => if r.is_err() { return },
            e = events.recv() => match e {
                Ok(j) if j.id == id.0 => {
                    if is_final(&j) {
                        finished = Some(j);
                    } else if !started && j.state == v1::JobState::Running as i32 {
                        started = true;
                        if !send(Event::Started(j)).await {
                            return;
                        }
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match handle.call(|t| Cmd::GetJob(id, t)).await {
                        Ok(j) if is_final(&j) => finished = Some(j),
                        Ok(_) => {}
                        Err(_) => return,
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// Stdin from the client to rank 0, once rank 0 runs.
async fn forward_stdin(
    handle: Handle,
    agents: Arc<AgentPool>,
    id: JobId,
    first: v1::AttachRequest,
    mut inbound: Streaming<v1::AttachRequest>,
) {
    // Answered once rank 0 runs, or with None once the job ended without it.
    let addr = match handle.call(|t| Cmd::Rank0(id, t)).await {
        Ok(Some(addr)) => addr,
        _ => return,
    };
    let Ok(mut client) = agents.client(&addr) else {
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
