//! `AgentRegistry`: what node agents call.

use std::sync::{Arc, Mutex};

use gang_proto::v1::{self, agent_registry_server::AgentRegistry};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::actor::{Cmd, Handle, wall_ns};
use crate::auth::{agent_node, any_node};
use crate::error::MasterError;
use crate::metrics::Metrics;
use crate::output::OutputHub;
use crate::placements::Placements;
use crate::service::convert;
use crate::state::reactor;
use crate::switch_stats::SwitchStats;

/// The most exits (and directly reported ranks) one gathered batch may carry: a job's
/// ranks, with room (a job has at most one rank per node of the mesh).
pub const MAX_EXIT_BATCH: usize = 1 << 17;

/// The longest a fence call is held before it is answered `pending` (an agent asks for
/// less: its channel ends calls after 5 s).
const MAX_FENCE_WAIT_MS: u32 = 60_000;
/// A liveness head's batch: itself and at most the widest group (`fanout_width` <= 256).
const MAX_BATCH: usize = 257;

fn beat_answer(a: reactor::BeatAnswer) -> v1::HeartbeatResponse {
    let link = |l: reactor::Link| v1::LivenessLink {
        x: l.node.0,
        y: l.node.1,
        address: l.address,
    };
    v1::HeartbeatResponse {
        known: a.known,
        liveness_parent: a.parent.map(link),
        liveness_children: a.children.into_iter().map(link).collect(),
    }
}

pub struct Registry {
    pub handle: Handle,
    pub output: Arc<OutputHub>,
    /// Which node holds which rank: an agent speaks only for its own.
    pub placements: Arc<Placements>,
    pub stats: Arc<Mutex<SwitchStats>>,
    pub metrics: Arc<Metrics>,
    /// The public half of the master's relay key (`agents::AgentPool::signer`).
    pub relay_key: Vec<u8>,
}

#[tonic::async_trait]
impl AgentRegistry for Registry {
    async fn register(
        &self,
        req: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        let r = req.get_ref();
        agent_node(&req, (r.x, r.y))?;
        let reg = convert::registration(req.into_inner());
        let done = self.handle.call(|tx| Cmd::Register(reg, tx)).await?;
        let mut answer = convert::registered(done);
        answer.relay_key = self.relay_key.clone();
        Ok(Response::new(answer))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let r = req.get_ref();
        let from = agent_node(&req, (r.x, r.y))?;
        let hb = convert::heartbeat(req.into_inner());
        let mut answers = self
            .handle
            .call(|tx| Cmd::Beats(from, vec![(hb, 0)], tx))
            .await?;
        self.metrics.heartbeat("direct");
        Ok(Response::new(beat_answer(
            answers.pop().unwrap_or_default(),
        )))
    }

    async fn heartbeat_batch(
        &self,
        req: Request<v1::HeartbeatBatchRequest>,
    ) -> Result<Response<v1::HeartbeatBatchResponse>, Status> {
        let r = req.get_ref();
        let own = r.beats.first().and_then(|b| b.beat.as_ref());
        let Some(own) = own else {
            return Err(Status::invalid_argument(
                "a batch starts with the head's own beat",
            ));
        };
        let from = agent_node(&req, (own.x, own.y))?;
        if r.beats.len() > MAX_BATCH {
            return Err(Status::invalid_argument(format!(
                "a batch holds at most {MAX_BATCH} beats, not {}",
                r.beats.len()
            )));
        }
        let beats = req
            .into_inner()
            .beats
            .into_iter()
            .filter_map(|b| Some((convert::heartbeat(b.beat?), b.age_ms)))
            .collect();
        let answers = self.handle.call(|tx| Cmd::Beats(from, beats, tx)).await?;
        self.metrics.heartbeat("batch");
        Ok(Response::new(v1::HeartbeatBatchResponse {
            answers: answers.into_iter().map(beat_answer).collect(),
        }))
    }

    async fn report_exit(
        &self,
        req: Request<v1::RankExit>,
    ) -> Result<Response<v1::RankExitAck>, Status> {
        let r = req.get_ref();
        let node = agent_node(&req, (r.x, r.y))?;
        self.placements.check(node, r.job_id, [r.rank]).await?;
        // The agent pushed all of the rank's output before this report: what the log
        // lacks of what the rank wrote now is lost for good.
        let lost = self
            .output
            .lost(r.job_id, r.rank, r.stdout_bytes, r.stderr_bytes)
            .map_err(|source| MasterError::Output {
                job: r.job_id,
                source,
            })?;
        let exit = convert::rank_exit(req.into_inner(), lost);
        self.handle.call(|tx| Cmd::RankExit(exit, tx)).await?;
        self.metrics.exit_report("single", 1);
        Ok(Response::new(v1::RankExitAck {}))
    }

    /// Exits gathered up a job's tree: from a node of the job, each exit's rank placed
    /// on the node it names; applied in one round of the state task.
    async fn report_exits(
        &self,
        req: Request<v1::RankExits>,
    ) -> Result<Response<v1::RankExitsAck>, Status> {
        let r = req.get_ref();
        let node = agent_node(&req, (r.x, r.y))?;
        let job = r.job_id;
        if r.exits.len() + r.direct.len() > MAX_EXIT_BATCH {
            return Err(Status::invalid_argument(format!(
                "a batch of {} exits: at most {MAX_EXIT_BATCH}",
                r.exits.len() + r.direct.len()
            )));
        }
        self.placements.check_member(node, job).await?;
        let mut exits = Vec::with_capacity(r.exits.len());
        for e in req.into_inner().exits {
            if e.job_id != job {
                return Err(Status::invalid_argument(format!(
                    "an exit of job {} in a batch of job {job}",
                    e.job_id
                )));
            }
            self.placements.check((e.x, e.y), job, [e.rank]).await?;
            // Each rank's output was pushed before its exit left its node.
            let lost = self
                .output
                .lost(job, e.rank, e.stdout_bytes, e.stderr_bytes)
                .map_err(|source| MasterError::Output { job, source })?;
            exits.push(convert::rank_exit(e, lost));
        }
        let n = exits.len();
        if n > 0 {
            self.handle.call(|tx| Cmd::RankExits(exits, tx)).await?;
        }
        self.metrics.exit_report("batch", n);
        Ok(Response::new(v1::RankExitsAck {}))
    }

    async fn push_output(
        &self,
        req: Request<v1::OutputBatch>,
    ) -> Result<Response<v1::OutputAck>, Status> {
        let node = any_node(&req)?;
        let b = req.into_inner();
        self.placements
            .check(node, b.job_id, b.chunks.iter().map(|c| c.rank))
            .await?;
        // Straight to the log: output never queues behind scheduling work.
        self.output
            .append(b.job_id, &b.chunks)
            .map_err(|source| MasterError::Output {
                job: b.job_id,
                source,
            })?;
        Ok(Response::new(v1::OutputAck {}))
    }

    async fn report_switches(
        &self,
        req: Request<v1::SwitchReport>,
    ) -> Result<Response<v1::SwitchReportAck>, Status> {
        let r = req.get_ref();
        agent_node(&req, (r.x, r.y))?;
        let r = req.into_inner();
        // Figures only: they never wait behind scheduling work.
        let samples = self
            .stats
            .lock()
            // Figures only: a panic elsewhere while holding the lock leaves them usable.
            .unwrap_or_else(|p| p.into_inner())
            .add(&r, wall_ns());
        let m = &self.metrics;
        let s = |ns: i64| ns.max(0) as f64 / 1e9;
        samples
            .latency_ns
            .iter()
            .for_each(|&v| m.switch_latency_seconds.observe(s(v)));
        samples
            .cost_ns
            .iter()
            .for_each(|&v| m.switch_cost_seconds.observe(s(v)));
        samples
            .skew_ns
            .iter()
            .for_each(|&v| m.switch_skew_seconds.observe(s(v)));
        m.switches_dropped.inc_by(r.dropped);
        m.msg_switch_outs_flushed.inc_by(r.msg_flushed);
        m.msg_switch_outs_unflushed.inc_by(r.msg_unflushed);
        Ok(Response::new(v1::SwitchReportAck {}))
    }

    async fn clock_probe(
        &self,
        req: Request<v1::ClockProbeRequest>,
    ) -> Result<Response<v1::ClockProbeResponse>, Status> {
        any_node(&req)?;
        // Answered here, not by the state task: queueing would widen the round trip and
        // with it the error bound.
        let t2_ns = wall_ns();
        let t1_ns = req.into_inner().t1_ns;
        Ok(Response::new(v1::ClockProbeResponse {
            t1_ns,
            t2_ns,
            t3_ns: wall_ns(),
        }))
    }

    async fn fence(
        &self,
        req: Request<v1::FenceRequest>,
    ) -> Result<Response<v1::FenceResponse>, Status> {
        let r = req.get_ref();
        agent_node(&req, (r.x, r.y))?;
        let known = r.known_epoch;
        let wait = (r.wait_ms > 0)
            .then(|| std::time::Duration::from_millis(r.wait_ms.min(MAX_FENCE_WAIT_MS).into()));
        let bytes_in = r.encoded_len();
        let arrival = convert::fence_arrival(req.into_inner());
        let call = self.handle.call(|tx| Cmd::Fence(arrival, tx));
        let space = match wait {
            None => call.await?,
            Some(wait) => match tokio::time::timeout(wait, call).await {
                Ok(space) => space?,
                // The rank stays in the fence (its waiter is dropped, and taken out when
                // it arrives again): the agent asks again at once.
                Err(_) => {
                    return Ok(Response::new(v1::FenceResponse {
                        pending: true,
                        ..Default::default()
                    }));
                }
            },
        };
        let (kvs, delta) = space.answer(known);
        let answer = v1::FenceResponse {
            kvs: kvs.into_iter().collect(),
            delta,
            pending: false,
        };
        self.metrics
            .fence_bytes("master", (bytes_in + answer.encoded_len()) as u64);
        Ok(Response::new(answer))
    }

    /// A fence among the job's agents completed: from rank 0's agent, of a placed job.
    async fn fence_done(
        &self,
        req: Request<v1::FenceDoneRequest>,
    ) -> Result<Response<v1::FenceDoneAck>, Status> {
        let r = req.get_ref();
        let node = agent_node(&req, (r.x, r.y))?;
        self.placements.check(node, r.job_id, [0]).await?;
        self.metrics.fences_done.inc();
        self.metrics.fence_bytes("agents", r.encoded_len() as u64);
        tracing::debug!(
            job = r.job_id,
            epoch = r.epoch,
            bytes = r.bytes,
            "fence among the agents completed"
        );
        Ok(Response::new(v1::FenceDoneAck {}))
    }
}
