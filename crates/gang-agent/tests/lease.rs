//! The master's lease end to end: an agent cut off from its master (no answer at all)
//! for longer than the lease the master stated stops its ranks, and keeps them through any
//! shorter silence, however many node timeouts long; with a master that states no lease
//! (an older one), the node timeout plus a heartbeat period is the lease. One whose master
//! is back sooner, or whose master is down (its host refuses the connection), keeps them.

mod common;

use std::time::Duration;

use common::*;
use gang_agent::AgentHandle;
use gang_agent::ranks::RankKey;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{RankRef, Stream};
use tokio::time::Instant;
use tonic::transport::Channel;

const X: u32 = 2;
const Y: u32 = 3;
const PERIOD: Duration = Duration::from_millis(HEARTBEAT_MS as u64);
/// How late after its deadline the lease may run out and a SIGTERMed `sleep` be reaped, on a
/// loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1000);

async fn setup(
    node_timeout: Duration,
    kill_grace: Duration,
) -> (TestRegistry, AgentHandle, NodeAgentClient<Channel>) {
    setup_with(
        MasterOptions {
            node_timeout_ms: node_timeout.as_millis() as u32,
            ..MasterOptions::default()
        },
        kill_grace,
    )
    .await
}

async fn setup_with(
    options: MasterOptions,
    kill_grace: Duration,
) -> (TestRegistry, AgentHandle, NodeAgentClient<Channel>) {
    let registry = TestRegistry::start_with(options).await;
    let mut cfg = registry.pki.agent_config(&registry, X, Y);
    cfg.kill_grace = kill_grace;
    let agent = gang_agent::start(cfg).await.expect("agent starts");
    let client = registry.pki.master_client(agent.addr, X, Y).await;
    (registry, agent, client)
}

fn key(job_id: u64) -> RankKey {
    RankKey { job_id, rank: 0 }
}

/// Launch `script` as rank 0 of `job_id` and wait until a heartbeat lists it.
async fn launch(
    client: &mut NodeAgentClient<Channel>,
    registry: &TestRegistry,
    job_id: u64,
    script: &str,
) -> u32 {
    let pid = client
        .launch(launch_req(job_id, 0, &["sh", "-c", script], "/"))
        .await
        .unwrap()
        .into_inner()
        .pid;
    let want = RankRef { job_id, rank: 0 };
    registry
        .wait_for("a heartbeat with the rank", |events| {
            events
                .iter()
                .any(|e| matches!(e, Event::Heartbeat(h) if h.running.contains(&want)))
                .then_some(())
        })
        .await;
    pid
}

/// When `cond` first held (polled every 2 ms).
async fn time_of(what: &str, mut cond: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if cond() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_is_down_not_away_leaves_the_ranks_running() {
    // Its host refuses the connection: the master crashed and is restarting. Nobody can
    // have failed this node's jobs, and the restarted master adopts them.
    let timeout = Duration::from_millis(400);
    let (registry, agent, mut client) = setup(timeout, Duration::from_millis(300)).await;
    launch(&mut client, &registry, 70, "exec sleep 30").await;

    let addr = registry.addr;
    let heartbeats = registry.heartbeat_log();
    let pki = registry.stop().await;
    let due = heartbeats.last().expect("heartbeats before") + timeout + PERIOD;
    tokio::time::sleep_until(due + SLACK).await;
    assert!(
        agent.node.ranks.is_running(key(70)),
        "a refused connection is not a cut link"
    );
    let registry = TestRegistry::start_on(addr, pki, MasterOptions::default()).await;
    let reg = registry.wait_register(1).await;
    assert_eq!(
        reg.running,
        vec![RankRef {
            job_id: 70,
            rank: 0
        }]
    );
    agent.shutdown().await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_within_the_timeout_finds_the_ranks_running() {
    // Long enough for the agent's register backoff (100 ms, doubling) to reach the
    // restarted master well within it.
    let timeout = Duration::from_millis(1500);
    let (registry, agent, mut client) = setup(timeout, Duration::from_millis(300)).await;
    let pid = launch(&mut client, &registry, 80, "exec sleep 30").await;

    let addr = registry.addr;
    let heartbeats = registry.heartbeat_log();
    let pki = registry.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let registry = TestRegistry::start_on(addr, pki, MasterOptions::default()).await;
    let reg = registry.wait_register(1).await;
    assert_eq!(
        reg.running,
        vec![RankRef {
            job_id: 80,
            rank: 0
        }]
    );

    // Past the deadline the silence would have had: still running.
    let due = heartbeats.last().unwrap() + timeout + PERIOD;
    tokio::time::sleep_until(due + Duration::from_millis(500)).await;
    assert!(agent.node.ranks.is_running(key(80)));
    assert!(!is_dead(pid));
    agent.shutdown().await;
    assert_eq!(registry.exit_of(80, 0).await.1, How::Signal(9));
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_agent_stops_its_ranks_after_timeout_plus_period() {
    // No answer at all (a cut link, a hung master): the master counts the node lost after
    // its timeout. The agent's calls wait up to 5 s; the lease does not wait for them.
    let timeout = Duration::from_millis(400);
    let grace = Duration::from_millis(300);
    let (registry, agent, mut client) = setup(timeout, grace).await;
    launch(&mut client, &registry, 90, "exec sleep 30").await;
    launch(
        &mut client,
        &registry,
        91,
        "trap '' TERM; echo armed; sleep 30",
    )
    .await;
    registry.wait_output(91, 0, Stream::Stdout, "armed").await;

    registry.set_silent(true);
    let nodes = &agent.node.ranks;
    let termed = time_of("the lease to stop job 90", || !nodes.is_running(key(90))).await;
    let killed = time_of("the grace to end job 91", || !nodes.is_running(key(91))).await;
    let due = registry.last_heartbeat_at().unwrap() + timeout + PERIOD;
    assert!(termed >= due, "stopped {:?} early", due - termed);
    assert!(termed < due + SLACK, "stopped {:?} late", termed - due);
    // The same path as a master-ordered kill: TERM, then KILL after the grace.
    assert!(killed >= due + grace, "{:?}", killed - due);
    // Exit reports are not held up by the silence of Register and Heartbeat.
    assert_eq!(registry.exit_of(90, 0).await.1, How::Signal(15));
    assert_eq!(registry.exit_of(91, 0).await.1, How::Signal(9));

    // Answering again: the agent is back in contact (a heartbeat or a registration
    // completes, from the held call or a new one).
    let seen = registry.events().len();
    registry.set_silent(false);
    registry
        .wait_for("the agent to be answered again", |events| {
            events[seen..]
                .iter()
                .any(|e| matches!(e, Event::Heartbeat(_) | Event::Register(_)))
                .then_some(())
        })
        .await;
    agent.shutdown().await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stated_lease_keeps_the_ranks_through_node_timeouts_and_then_stops_them() {
    // A master silent for many node timeouts (paused, failing over): the ranks run on;
    // only the lease, counted from its last answer, stops them.
    let lease = Duration::from_millis(3000);
    let (registry, agent, mut client) = setup_with(
        MasterOptions {
            node_timeout_ms: 300,
            agent_lease_ms: lease.as_millis() as u32,
            ..MasterOptions::default()
        },
        Duration::from_millis(300),
    )
    .await;
    let pid = launch(&mut client, &registry, 95, "exec sleep 30").await;
    registry.set_silent(true);
    let last = registry.last_heartbeat_at().unwrap();
    // Five node timeouts and a heartbeat period past the last answer: running.
    tokio::time::sleep_until(last + Duration::from_millis(1500) + PERIOD).await;
    assert!(agent.node.ranks.is_running(key(95)));
    assert!(!is_dead(pid));
    let nodes = &agent.node.ranks;
    let termed = time_of("the lease to stop job 95", || !nodes.is_running(key(95))).await;
    let due = registry.last_heartbeat_at().unwrap() + lease;
    assert!(termed >= due, "stopped {:?} early", due - termed);
    assert!(termed < due + SLACK, "stopped {:?} late", termed - due);
    assert_eq!(registry.exit_of(95, 0).await.1, How::Signal(15));
    registry.set_silent(false);
    agent.shutdown().await;
    registry.stop().await;
}
