//! The sender of exits up a job's tree (`tree::exits_up` holds what waits): batches as
//! they fall due, to the parent's node first, the master if the parent is gone. Here, in
//! the session, because it needs the whole node (its ranks, its peers), which the tree's
//! own state must not import.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gang_proto::v1::RankExits;
use tonic::Status;
use tracing::{debug, warn};

use crate::error::Coord;
use crate::node::Node;
use crate::ranks::RankKey;
use crate::tree::exit_gather::{Batch, Place};
use crate::tree::exits_up::*;

/// Send batches as they fall due, until aborted. `master` delivers a batch to the master
/// (retrying until it is acknowledged or refused for good).
pub async fn run<M, Fut>(node: Arc<Node>, master: M)
where
    M: Fn(RankExits) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let exits = Arc::clone(&node.exits);
    loop {
        let now = Instant::now();
        let (due, next) = exits.take_due(now);
        for (job, place, batch) in due {
            let (node, master) = (Arc::clone(&node), master.clone());
            tokio::spawn(async move { send(&node, job, place, batch, master).await });
        }
        // A deadline far off still ends the wait now and then: a gather joined since.
        let wait = next.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
        tokio::select! {
            _ = exits.wake.notified() => {}
            _ = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
        }
    }
}

async fn send<M, Fut>(node: &Node, job: u64, place: Place, batch: Batch, master: M)
where
    M: Fn(RankExits) -> Fut,
    Fut: Future<Output = ()>,
{
    let own = batch.exits.iter().any(|e| e.rank == place.rank);
    let req = RankExits {
        x: node.coord.x,
        y: node.coord.y,
        job_id: job,
        rank: place.rank,
        exits: batch.exits,
        direct: batch.direct,
    };
    let taken = match &batch.to {
        Some((parent, address)) => to_parent(node, &req, place.node_of(*parent), address).await,
        None => false,
    };
    if !taken {
        master(req).await;
    }
    if own {
        // Accepted: the parent or the master has it; the rank is history here.
        node.ranks.forget(RankKey {
            job_id: job,
            rank: place.rank,
        });
    }
}

/// Offer the batch to the parent, for `PARENT_PATIENCE` while it is unreachable or has
/// no rank of the job yet. Whether it took it.
async fn to_parent(node: &Node, req: &RankExits, at: Coord, address: &str) -> bool {
    let Some(peers) = node.exits.peers.get() else {
        return false;
    };
    let give_up = Instant::now() + PARENT_PATIENCE;
    let mut delay = Duration::from_millis(20);
    loop {
        let result = match peers.tree_client(at.x, at.y, address) {
            Ok(mut c) => tokio::time::timeout(CALL_TIMEOUT, c.exits_up(req.clone()))
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("no answer"))),
            Err(e) => Err(Status::unavailable(e)),
        };
        match result {
            Ok(_) => return true,
            Err(s)
                if retryable(s.code())
                    && !gang_proto::relay::refused(&s)
                    && Instant::now() + delay < give_up =>
            {
                debug!(
                    job = req.job_id,
                    "exits up to {at}: {}; retrying",
                    s.message()
                );
            }
            Err(s) => {
                warn!(
                    job = req.job_id,
                    "the parent at node {at} did not take {} exits: {}; sending them to the master",
                    req.exits.len(),
                    s.message()
                );
                return false;
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

fn retryable(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unavailable | Cancelled | DeadlineExceeded | Unknown | NotFound | ResourceExhausted
    )
}
