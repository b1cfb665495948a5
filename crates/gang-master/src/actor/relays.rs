//! Orders for many agents, down the order tree (`gang_core::tree::fanout`, `gang_proto::relay`):
//! a job's launch, its signal, a round's slice tables. The master signs the order once
//! and calls at most `fanout.width` agents; their answers carry every node's outcome,
//! which comes back to the actor as the same commands a direct call gives.

use std::collections::HashMap;
use std::sync::Arc;

use gang_core::JobId;
use gang_core::tree::Route;
use gang_core::tree::fanout;
use gang_proto::relay;
use gang_proto::v1::{self, RelayOrder, RelayOutcome, relay_order::Work};
use prost::Message;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::actor::{Cmd, calls, wall_ns};
use crate::agents::AgentPool;
use crate::metrics::Metrics;
use crate::state::effects::{Coord, LaunchOrder, NodeTable};
use crate::state::events::LaunchFailure;

/// How long a relayed order stays good (against replays; far beyond any tree's bound).
const ORDER_LIFETIME_NS: i64 = 120_000_000_000;

/// One node an order is for, and where it listens.
pub type Target = (Coord, String);

/// Sign `work` for `targets`, send it down the tree, hand each subtree's outcomes to
/// `each` (called once per subtree with every node of it, in no particular order: the
/// actor then hears of a subtree in one command, not one a node).
/// `root_parent`: for a launch with fences among the agents, the first node's address,
/// the fence parent of the other subtrees' heads; `launch`: the job whose launch this is,
/// whose progress is recorded as each head answers.
fn send(
    agents: &Arc<AgentPool>,
    metrics: &Arc<Metrics>,
    (work, table_of): (Work, Vec<u32>),
    targets: &[Target],
    (root_parent, launch): (Option<String>, Option<JobId>),
    each: impl Fn(Vec<(Coord, RelayOutcome)>) + Clone + Send + 'static,
) {
    metrics.relayed(match &work {
        Work::Launch(_) => "launch",
        Work::Signal(_) => "signal",
        Work::Tables(_) => "tables",
    });
    let order = RelayOrder {
        work: Some(work),
        expires_ns: wall_ns() + ORDER_LIFETIME_NS,
        nodes: targets
            .iter()
            .map(|((x, y), _)| fanout::pack(*x, *y))
            .collect(),
        table_of,
    }
    .encode_to_vec();
    let route = Arc::new(Route {
        signature: agents.signer.sign(&order),
        order,
        nodes: targets.iter().map(|(n, _)| *n).collect(),
        base: 0,
        addresses: targets.iter().map(|(_, a)| a.clone()).collect(),
        width: agents.fanout.width,
        hop_timeout_ms: agents.fanout.hop_timeout_ms,
        from: "the master".to_owned(),
    });
    let heads = fanout::split(0..targets.len(), agents.fanout.width as usize);
    if let Some(job) = launch {
        agents.progress.begin(job, heads.len(), targets.len());
    }
    for range in heads {
        let (agents, route, each) = (Arc::clone(agents), Arc::clone(&route), each.clone());
        let metrics = Arc::clone(metrics);
        let parent = match &root_parent {
            Some(root) if range.start != 0 => root.clone(),
            _ => String::new(),
        };
        tokio::spawn(async move {
            let expected = range.clone();
            let outcomes = relay::forward(&route, range, &parent, |x, y, a| {
                agents.relay_client((x, y), a)
            })
            .await;
            let mut answered = vec![false; expected.len()];
            let index: HashMap<Coord, usize> = route.nodes[expected.clone()]
                .iter()
                .enumerate()
                .map(|(i, n)| (*n, i))
                .collect();
            let mut done = Vec::with_capacity(expected.len());
            for o in outcomes {
                let node = (o.x, o.y);
                if !o.unreachable.is_empty() {
                    metrics.relay_unreached.inc();
                }
                match index.get(&node) {
                    Some(&i) if !answered[i] => {
                        answered[i] = true;
                        done.push((node, o));
                    }
                    _ => debug!(node = ?node, "a relay outcome for no node of its subtree"),
                }
            }
            if let Some(job) = launch {
                let started = done
                    .iter()
                    .filter(|(_, o)| o.refused.is_empty() && o.unreachable.is_empty());
                agents.progress.subtree_done(job, started.count());
            }
            // A subtree head that answered for less than all of it: the rest unreached.
            for (i, answered) in answered.into_iter().enumerate() {
                if !answered {
                    metrics.relay_unreached.inc();
                    let node = route.nodes[expected.start + i];
                    let unreachable = format!(
                        "node ({},{}): no outcome came back through the relay",
                        node.0, node.1
                    );
                    let o = RelayOutcome {
                        x: node.0,
                        y: node.1,
                        unreachable,
                        ..Default::default()
                    };
                    done.push((node, o));
                }
            }
            each(done);
        });
    }
}

/// A job's launch on every node of `orders` (each the order of one rank).
pub fn launch_job(
    agents: &Arc<AgentPool>,
    metrics: &Arc<Metrics>,
    tx: &mpsc::Sender<Cmd>,
    cluster_id: &str,
    orders: Vec<(Coord, String, LaunchOrder)>,
    fence_width: u32,
) {
    let job = orders[0].2.job;
    let rank_of: HashMap<Coord, u32> = orders.iter().map(|(n, _, o)| (*n, o.rank)).collect();
    let targets: Vec<Target> = orders.iter().map(|(n, a, _)| (*n, a.clone())).collect();
    // Every rank's order is the job's but for its rank, and stdin (rank 0's only): the
    // agents put those back.
    let stdin = orders.iter().any(|(_, _, o)| o.spec.stdin);
    let (_, _, first) = orders.into_iter().next().expect("one order at least");
    let mut template = calls::launch_request(first, cluster_id);
    template.rank = 0;
    template.stdin = stdin;
    template.fence_width = fence_width;
    let root_parent = (fence_width > 0).then(|| targets[0].1.clone());
    let tx = tx.clone();
    send(
        agents,
        metrics,
        (Work::Launch(template), vec![]),
        &targets,
        (root_parent, Some(job)),
        move |done| {
            let results = done
                .into_iter()
                .map(|(node, o)| {
                    let result = if !o.refused.is_empty() {
                        Err(LaunchFailure::Refused(o.refused))
                    } else if !o.unreachable.is_empty() {
                        Err(LaunchFailure::Unreachable {
                            node,
                            detail: o.unreachable,
                        })
                    } else {
                        Ok(o.value as u32)
                    };
                    (rank_of[&node], result)
                })
                .collect();
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(Cmd::Launched(job, results)).await });
        },
    );
}

/// A job's signal on `targets`.
pub fn signal_job(
    agents: &Arc<AgentPool>,
    metrics: &Arc<Metrics>,
    job: JobId,
    grace_ms: u32,
    targets: &[Target],
) {
    let work = Work::Signal(v1::SignalRequest {
        job_id: job.0,
        grace_ms,
    });
    send(
        agents,
        metrics,
        (work, vec![]),
        targets,
        (None, None),
        move |done| {
            for ((x, y), o) in done {
                let failed = if o.refused.is_empty() {
                    &o.unreachable
                } else {
                    &o.refused
                };
                if !failed.is_empty() {
                    warn!(%job, node = %format!("{x},{y}"), error = %failed, "signal failed");
                }
            }
        },
    );
}

/// Slice tables for many nodes: the distinct ones once each, and which is whose.
pub fn tables(
    agents: &Arc<AgentPool>,
    metrics: &Arc<Metrics>,
    tx: &mpsc::Sender<Cmd>,
    tables: Vec<(Coord, String, NodeTable)>,
) {
    let mut distinct: Vec<v1::NodeTable> = Vec::new();
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut table_of = Vec::with_capacity(tables.len());
    let mut targets = Vec::with_capacity(tables.len());
    let version_of: Arc<HashMap<Coord, u64>> =
        Arc::new(tables.iter().map(|(n, _, t)| (*n, t.version)).collect());
    for (node, address, table) in tables {
        let t = calls::node_table(&table);
        let i = *seen.entry(t.encode_to_vec()).or_insert_with(|| {
            distinct.push(t);
            (distinct.len() - 1) as u32
        });
        table_of.push(i);
        targets.push((node, address));
    }
    let tx = tx.clone();
    let work = Work::Tables(v1::RelayTables { distinct });
    send(
        agents,
        metrics,
        (work, table_of),
        &targets,
        (None, None),
        move |done| {
            let (mut acked, mut lost) = (Vec::with_capacity(done.len()), Vec::new());
            for (node, o) in done {
                if o.refused.is_empty() && o.unreachable.is_empty() {
                    acked.push((node, o.value));
                } else {
                    debug!(node = ?node, "slice table not delivered: {}{}", o.refused, o.unreachable);
                    lost.push((node, version_of.get(&node).copied().unwrap_or(0)));
                }
            }
            let tx = tx.clone();
            tokio::spawn(async move {
                if !acked.is_empty() {
                    let _ = tx.send(Cmd::TablesAcked(acked)).await;
                }
                if !lost.is_empty() {
                    let _ = tx.send(Cmd::TablesLost(lost)).await;
                }
            });
        },
    );
}
