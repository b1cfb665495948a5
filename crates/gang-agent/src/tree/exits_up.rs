//! Exits gathered up a job's tree, the running part (the rules are `exit_gather`'s): the
//! uplink hands a rank's clean exit here once its output is pushed (`hold`), children's
//! batches come in by `NodeRelay.ExitsUp` (`from_child`), and `run` sends each batch when
//! it is due: to the parent, or from the root to the master (`AgentRegistry.ReportExits`).
//!
//! An accepted exit is never lost: a batch the parent cannot take (unreachable, or without
//! the job after `PARENT_PATIENCE`, or refusing) goes to the master directly, and a rank
//! is forgotten here only once its batch was accepted. Failures never wait: the uplink
//! sends them to the master at once, as before, and tells the gather (`went_direct`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gang_proto::v1::{RankExit, RankExits};
use tokio::sync::Notify;
use tonic::Status;

use super::exit_gather::{Batch, Gather, Place, urgent};
use crate::error::Coord;
use crate::peers::PeerPool;

/// How long a batch is offered to a parent that is unreachable or has no rank of the
/// job yet (it may launch after its children) before it goes to the master instead. A
/// parent whose agent is gone refuses the connection and is given up at once; one that
/// is slow is not dead: at 5 s (and a call's 5 s), a 10,000-node emulated fleet's first
/// launch sent 5,635 batches to the master while parents shook hands with thousands of
/// children at once, the very load the tree is there to keep off the master.
pub const PARENT_PATIENCE: Duration = Duration::from_secs(20);
/// The most exits and ranks one batch from a child may name (a job's ranks, with room).
pub const MAX_BATCH: usize = 1 << 17;
/// A job's gather that holds nothing and heard nothing this long is dropped (a subtree
/// with a dead node is never complete).
const FORGET_AFTER: Duration = Duration::from_secs(600);
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Default)]
struct State {
    /// Each job's gather and when it last changed.
    jobs: HashMap<u64, (Gather, Instant)>,
    /// Until when batches handed up from here may still be held above.
    held_above_until: Option<Instant>,
}

/// The exits of this node's jobs on their way up their trees.
pub struct ExitTree {
    node: Coord,
    state: Mutex<State>,
    pub(crate) wake: Notify,
    pub(crate) peers: OnceLock<Arc<PeerPool>>,
}

impl std::fmt::Debug for ExitTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExitTree")
            .field("node", &self.node)
            .finish()
    }
}

impl ExitTree {
    pub fn new(node: Coord) -> Self {
        ExitTree {
            node,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            peers: OnceLock::new(),
        }
    }

    pub fn set_peers(&self, peers: Arc<PeerPool>) {
        let _ = self.peers.set(peers);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job's rank here gathers exits in its tree (a launch that came twice keeps the
    /// first's gather).
    pub fn join(&self, job: u64, place: Place) {
        self.lock()
            .jobs
            .entry(job)
            .or_insert_with(|| (Gather::new(place), Instant::now()));
    }

    /// A rank's exit leaves this node (its output is pushed): taken to go up the tree
    /// (true), or not, to be sent to the master now (false; then `went_direct`).
    pub fn hold(&self, exit: &RankExit) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let Some((g, touched)) = st.jobs.get_mut(&exit.job_id) else {
            return false;
        };
        if g.place.rank != exit.rank || urgent(exit, g.signalled) {
            return false;
        }
        g.own(exit.clone(), now);
        *touched = now;
        drop(st);
        self.wake.notify_one();
        true
    }

    /// The master had this node signal the job: its ranks' deaths by signal are gathered.
    pub fn signalled(&self, job: u64) {
        if let Some((g, _)) = self.lock().jobs.get_mut(&job) {
            g.signalled = true;
        }
    }

    /// The rank's exit went to the master directly (a failure, or a launch that failed).
    pub fn went_direct(&self, job: u64, rank: u32) {
        let now = Instant::now();
        let mut st = self.lock();
        if let Some((g, touched)) = st.jobs.get_mut(&job)
            && g.place.rank == rank
        {
            g.own_direct(now);
            *touched = now;
            drop(st);
            self.wake.notify_one();
        }
    }

    /// A child's batch, from node `from` (its certificate).
    pub fn from_child(&self, b: RankExits, from: Coord) -> Result<(), Status> {
        if b.exits.len() + b.direct.len() > MAX_BATCH {
            return Err(Status::invalid_argument(format!(
                "node {}: a batch of {} exits, at most {MAX_BATCH}",
                self.node,
                b.exits.len() + b.direct.len()
            )));
        }
        if (Coord { x: b.x, y: b.y }) != from {
            return Err(Status::permission_denied(format!(
                "node {}: a batch from node {from} that says it is from ({},{})",
                self.node, b.x, b.y
            )));
        }
        let now = Instant::now();
        let mut st = self.lock();
        let Some((g, touched)) = st.jobs.get_mut(&b.job_id) else {
            // Retried by the child: this node's rank may not be launched yet.
            return Err(Status::not_found(format!(
                "node {}: no rank of job {} here (yet)",
                self.node, b.job_id
            )));
        };
        g.child(b.rank, from, (b.job_id, b.exits, b.direct), now)
            .map_err(|m| Status::permission_denied(format!("node {}: {m}", self.node)))?;
        *touched = now;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// Whether exits handed up from here may still be held above, unknown to the master:
    /// until then the node keeps the busy heartbeat rate the master expects of it.
    pub fn held_above(&self) -> bool {
        self.lock()
            .held_above_until
            .is_some_and(|t| Instant::now() < t)
    }

    /// The batches due now, with their job and sender's place; when to look again.
    pub(crate) fn take_due(&self, now: Instant) -> (Vec<(u64, Place, Batch)>, Option<Instant>) {
        let mut st = self.lock();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        let mut above = st.held_above_until;
        st.jobs.retain(|&job, (g, touched)| {
            if let Some(b) = g.due(now) {
                if b.to.is_some() {
                    above = above.max(Some(now + g.place.held_above()));
                }
                due.push((job, g.place.clone(), b));
            }
            if let Some(d) = g.deadline() {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
            !g.finished() && now.duration_since(*touched) < FORGET_AFTER
        });
        st.held_above_until = above;
        (due, next)
    }
}
