//! The node: what the NodeAgent service and the registry session act on. It owns the rank
//! registry and the outbox, and implements Launch, Signal and Stdin in domain terms (the
//! gRPC adapter in `service.rs` only converts).

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::{AgentError, Coord};
use crate::launch::{self, LaunchPolicy, NodeFacts, NodeParts};
use crate::msg::MsgHub;
use crate::msg::fence_tree::Tree;
use crate::output::Outbox;
use crate::ranks::{Ranks, StdinMsg, StdinTarget};
use crate::request::RankRequest;
use crate::rt::clock::Clock;
use crate::switch::Switcher;
use crate::tree::exit_gather::Place;

#[derive(Debug)]
pub struct Node {
    pub coord: Coord,
    pub ranks: Arc<Ranks>,
    pub outbox: Arc<Outbox>,
    /// SIGTERM-to-SIGKILL grace for jobs the master tells us to drop.
    pub kill_grace: Duration,
    /// Time slicing: the slice tables and the switch thread.
    pub switch: Arc<Switcher>,
    /// The master clock as this node estimates it.
    pub clock: Arc<Clock>,
    /// The ranks' messaging-library directories, fences and activity.
    pub msg: Arc<MsgHub>,
    /// When the master was last heard from (`lease`): its answers, and its launches.
    pub lease: Arc<crate::master_link::lease::Lease>,
    /// The master's key for orders that come down the order tree (set at registration).
    pub order_key: crate::master_link::order_key::OrderKey,
    /// Exits gathered up their jobs' trees on their way to the master.
    pub exits: Arc<crate::tree::exits_up::ExitTree>,
    /// Where its heartbeats go, and its children's beats while it heads a group.
    pub liveness: crate::tree::beats::Liveness,
    /// What a launch works with.
    parts: NodeParts,
}

impl Node {
    pub fn new(
        coord: Coord,
        kill_grace: Duration,
        policy: LaunchPolicy,
        switch: Arc<Switcher>,
        clock: Arc<Clock>,
        msg: Arc<MsgHub>,
        outbox: Arc<Outbox>,
    ) -> Arc<Self> {
        let ranks = Ranks::new();
        let parts = NodeParts {
            facts: NodeFacts {
                node: coord,
                agent_uid: nix::unistd::geteuid().as_raw(),
                agent_gid: nix::unistd::getegid().as_raw(),
                policy,
                pmix_built: gang_pmix::AVAILABLE,
            },
            ranks: Arc::clone(&ranks),
            outbox: Arc::clone(&outbox),
            switch: Arc::clone(&switch),
            msg: Arc::clone(&msg),
            usage: crate::launch::UsageCell::new(coord),
        };
        Arc::new(Node {
            msg,
            coord,
            ranks,
            outbox,
            kill_grace,
            switch,
            clock,
            lease: crate::master_link::lease::Lease::new(),
            order_key: Default::default(),
            exits: Arc::new(crate::tree::exits_up::ExitTree::new(coord)),
            liveness: Default::default(),
            parts,
        })
    }

    /// Launch one rank: the pure plan, then its start; returns its pid. Must run in a
    /// task on a runtime worker thread (see `launch::command::command`).
    pub async fn launch_rank(&self, req: RankRequest) -> Result<u32, AgentError> {
        let key = req.key;
        // Before the rank can fence: from its first fence on, it fences in its tree.
        let tree = match (&req.fence, req.part) {
            (Some(f), Some(part)) if key.rank < part.w * part.h => Some((
                Tree::new(key.rank, part, f.width, f.parent.clone()),
                // Its exit goes up the same tree.
                Place::new(key.rank, part, f.width, f.parent.clone()),
            )),
            _ => None,
        };
        let plan = launch::plan(req, &self.parts.facts)?;
        if let Some((tree, place)) = tree {
            self.msg.join_fence_tree(key, tree);
            self.exits.join(key.job_id, place);
        }
        let started = if self.parts.facts.policy.emulate {
            play(plan, &self.parts)
        } else {
            launch::start(plan, &self.parts).await
        };
        if let Err(AgentError::Duplicate { .. }) = &started {
            // The rank already here keeps its tree.
        } else if started.is_err() {
            self.msg.remove_fence_tree(key);
            // The master hears of it from the launch's answer: counted, not awaited.
            self.exits.went_direct(key.job_id, key.rank);
        }
        started
    }

    /// SIGCONT+SIGTERM to the job's ranks here, SIGKILL after `grace`. Whether any were here.
    /// The job leaves time slicing first, and is continued (thawed, reniced), so that a
    /// switched-out rank can act on the SIGTERM.
    pub fn signal(&self, job_id: u64, grace: Duration) -> bool {
        self.switch.release_job(job_id);
        self.exits.signalled(job_id);
        let found = self.ranks.signal_job(job_id, grace);
        if found {
            info!(
                job_id,
                grace_ms = grace.as_millis() as u64,
                "signalling job"
            );
        }
        found
    }

    /// Forward stdin data (or EOF) to the job's rank with a stdin pipe here.
    pub async fn stdin(&self, job_id: u64, data: Vec<u8>, eof: bool) -> Result<(), AgentError> {
        let tx = match self.ranks.stdin_target(job_id) {
            StdinTarget::UnknownJob => {
                return Err(AgentError::UnknownJob {
                    node: self.coord,
                    job_id,
                });
            }
            // The rank exited or never read stdin: like writing to a closed pipe, the data
            // is lost, and that is not the sender's error.
            StdinTarget::Closed => return Ok(()),
            StdinTarget::Pipe(tx) => tx,
        };
        if !data.is_empty() {
            // A send error means the writer is gone (pipe closed): not an error either.
            let _ = tx.send(StdinMsg::Data(data)).await;
        }
        if eof {
            let _ = tx.send(StdinMsg::Eof).await;
        }
        Ok(())
    }

    /// Stop every rank here the way a master-ordered kill does (`signal` with the kill
    /// grace: continued, SIGTERM, SIGKILL after the grace). Returns the jobs signalled.
    pub fn stop_all(&self) -> Vec<u64> {
        let mut jobs: Vec<u64> = self.ranks.running().iter().map(|k| k.job_id).collect();
        // Sorted by (job, rank): a job's ranks are adjacent.
        jobs.dedup();
        for &job_id in &jobs {
            self.signal(job_id, self.kill_grace);
        }
        jobs
    }

    /// Shutdown: stop switching and continue every rank (a frozen one cannot even die),
    /// SIGKILL every rank's group, and wait (bounded) until all are reaped.
    pub async fn kill_all(&self, deadline: Instant) -> bool {
        self.switch.stop_and_release_all().await;
        let running = self.ranks.running().len();
        if running > 0 {
            info!(running, "killing all ranks");
        }
        self.ranks.kill_all();
        let reaped = self.ranks.wait_none_running(deadline).await;
        if !reaped {
            warn!(
                still = ?self.ranks.running(),
                "ranks not reaped in time after {}",
                Signal::SIGKILL
            );
        }
        reaped
    }
}

/// An emulated node's rank: played, not started (`emulate`, a test tool).
#[cfg(feature = "emulate")]
fn play(plan: launch::LaunchPlan, parts: &launch::NodeParts) -> Result<u32, AgentError> {
    crate::emulate::played::start(plan, parts)
}

/// Without the `emulate` feature no node is emulated: `main` refuses `--emulate`.
#[cfg(not(feature = "emulate"))]
fn play(plan: launch::LaunchPlan, _: &launch::NodeParts) -> Result<u32, AgentError> {
    Err(AgentError::InvalidArgument {
        node: plan.node,
        what: "this agent was built without the emulate feature".into(),
    })
}
