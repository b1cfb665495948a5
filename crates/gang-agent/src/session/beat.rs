//! One heartbeat, sent where the liveness tree says (`tree::beats`): to the master alone,
//! to the master with the children's beats (a head), or to the head (a child). A child
//! whose head fails it sends the same beat to the master at once: the master hears it
//! this period whatever became of its head.

use std::time::Duration;

use gang_proto::v1::{BatchedBeat, BeatRequest, HeartbeatBatchRequest, HeartbeatRequest};
use tokio::time::Instant;
use tonic::Status;
use tracing::{debug, warn};

use crate::master_link::channel::RegistryClient;
use crate::master_link::lease::Lease;
use crate::node::Node;
use crate::tree::beats::{Route, UNANSWERED_BEATS};

/// Send this period's beat. Ok(false): the master does not know this node (register
/// again); Err: the master could not be reached. `patience`: how long the head may take
/// to answer (a slow head costs a beat that much delay, within the node timeout; a
/// period alone was too short for heads on a loaded host).
pub async fn send(
    client: &RegistryClient,
    node: &Node,
    req: HeartbeatRequest,
    (period, patience): (Duration, Duration),
    lease: &Lease,
) -> Result<bool, Status> {
    match node.liveness.route(Instant::now()) {
        Route::Master => direct(client, node, req, lease).await,
        Route::Batch(children) => batch(client, node, req, children, lease).await,
        Route::Head(head) => {
            let started = Instant::now();
            let peers = node.liveness.peers();
            let call = async {
                let mut c = peers
                    .ok_or_else(|| Status::unavailable("no channels to other agents"))?
                    .tree_client(head.x, head.y, &head.address)
                    .map_err(Status::invalid_argument)?;
                let beat = BeatRequest {
                    beat: Some(req.clone()),
                };
                match tokio::time::timeout(patience, c.beat(beat)).await {
                    Ok(r) => r.map(tonic::Response::into_inner),
                    Err(_) => Err(Status::deadline_exceeded(format!(
                        "no answer within {patience:?}"
                    ))),
                }
            };
            match call.await {
                Ok(resp) => {
                    // The head may take a patience to batch our beat and as long for
                    // the master to answer it: while the head's batches come back, a busy
                    // child holds to it as long as under the old fixed bound.
                    let age = Duration::from_millis(u64::from(resp.answer_age_ms));
                    let fresh = node.liveness.judge_answer(
                        started,
                        age,
                        (2 * patience, 2 * patience + period),
                    );
                    let answer = resp.answer.filter(|_| fresh);
                    if node
                        .liveness
                        .head_took(answer.is_some(), Instant::now(), period)
                    {
                        warn!(
                            head = %format!("{},{}", head.x, head.y),
                            "liveness head brought no fresh answer of the master {UNANSWERED_BEATS} \
                             beats running; beating the master"
                        );
                    }
                    let Some(a) = answer else {
                        return Ok(true);
                    };
                    node.liveness.answered(&a);
                    if a.known {
                        lease.heard(started.checked_sub(age).unwrap_or(started));
                    }
                    Ok(a.known)
                }
                Err(status) => {
                    warn!(
                        head = %format!("{},{}", head.x, head.y),
                        "liveness head failed a beat: {}: {}; beating the master",
                        status.code(),
                        status.message()
                    );
                    node.liveness.head_failed(Instant::now(), period);
                    direct(client, node, req, lease).await
                }
            }
        }
    }
}

async fn direct(
    client: &RegistryClient,
    node: &Node,
    req: HeartbeatRequest,
    lease: &Lease,
) -> Result<bool, Status> {
    let resp = client.clone().heartbeat(req).await?.into_inner();
    node.liveness.answered(&resp);
    if resp.known {
        lease.heard(Instant::now());
    }
    Ok(resp.known)
}

/// A head's beat with its children's: one call, one answer for each.
async fn batch(
    client: &RegistryClient,
    node: &Node,
    req: HeartbeatRequest,
    children: Vec<(HeartbeatRequest, u32)>,
    lease: &Lease,
) -> Result<bool, Status> {
    let coords: Vec<(u32, u32)> = children.iter().map(|(b, _)| (b.x, b.y)).collect();
    let beats = std::iter::once((req, 0))
        .chain(children)
        .map(|(beat, age_ms)| BatchedBeat {
            beat: Some(beat),
            age_ms,
        })
        .collect();
    let resp = client
        .clone()
        .heartbeat_batch(HeartbeatBatchRequest { beats })
        .await?
        .into_inner();
    let now = Instant::now();
    let mut answers = resp.answers.into_iter();
    let Some(own) = answers.next() else {
        return Err(Status::internal("the master answered a batch with nothing"));
    };
    node.liveness.answered(&own);
    if own.known {
        lease.heard(now);
    }
    for (child, answer) in coords.into_iter().zip(answers) {
        node.liveness.child_answered(child, answer, now);
    }
    debug!("heartbeat batch answered");
    Ok(own.known)
}
