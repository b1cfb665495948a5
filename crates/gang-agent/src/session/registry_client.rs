//! The agent's side of the master's AgentRegistry: the session (Register, then Heartbeat
//! until the master forgets us or refuses a beat, then Register again) and the uplink (deliver
//! the outbox: output pushes and exit reports, each retried until acknowledged).
//!
//! The two run as separate tasks on one lazily connected channel (with the clock probes,
//! `clock::run_probes`, and the switch reports, `switch::report`), so a master restart
//! is survived by all: the channel reconnects, the session re-registers with the ranks
//! still running, and the uplink resends what was not acknowledged.
//!
//! Every AgentRegistry call of the agent is made here: the clock and the switch reporter
//! are given `probe_clock` and `report_switches` as functions (wired in `agent.rs`), so
//! that they, like everything below `node`, never depend on this module.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gang_core::time::clock::Probe;
use gang_proto::v1::agent_registry_client::AgentRegistryClient;
use gang_proto::v1::{
    ClockProbeRequest, HeartbeatRequest, RankExits, RankRef, RegisterRequest, SwitchReport,
};
use tonic::transport::{ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tracing::{debug, error, info, warn};

use crate::master_link::lease::{Lease, Liveness};
use crate::node::Node;
use crate::output::Outgoing;
use crate::ranks::RankKey;
use crate::rt::clock::realtime_ns;
use crate::session::exits_sender;

pub use crate::master_link::channel::{MasterChannel, RegistryClient};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// While the master stays unreachable, repeat the warning this often (in attempts).
const WARN_EVERY: u32 = 30;
/// Used when the master answers heartbeat_ms = 0.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// A probe that takes longer than this is useless for timing anyway.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A channel to the master's agent port that connects on first use and reconnects after
/// failures, over mutual TLS (`tls`: this node's identity, the master verified by name).
///
/// `master` may list several masters' agent ports, comma-separated: masters that share
/// their state in etcd, of which only the leader listens. The channel balances over the
/// ones that answer, one at a time (`MasterChannel`), so it follows the leader through a
/// failover.
pub fn connect(
    master: &str,
    tls: ClientTlsConfig,
) -> Result<RegistryClient, tonic::transport::Error> {
    let endpoint = |url: &str| -> Result<Endpoint, tonic::transport::Error> {
        Ok(Endpoint::from_shared(url.to_owned())?
            .tls_config(tls.clone())?
            .connect_timeout(Duration::from_secs(1))
            // A hung master must not hang the session or the uplink forever.
            .timeout(Duration::from_secs(5))
            .tcp_nodelay(true))
    };
    let channels = master
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| Ok(endpoint(u)?.connect_lazy()))
        .collect::<Result<Vec<_>, tonic::transport::Error>>()?;
    Ok(AgentRegistryClient::new(MasterChannel::new(channels)))
}

/// Capped exponential backoff, 100 ms to 1 s.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    failures: u32,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            next: BACKOFF_MIN,
            failures: 0,
        }
    }

    /// Count a failure; returns whether it deserves a warning (the first, then every
    /// `WARN_EVERY`th: enough to see in the log that the master is still gone).
    fn fail(&mut self) -> bool {
        self.failures += 1;
        self.failures == 1 || self.failures.is_multiple_of(WARN_EVERY)
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(BACKOFF_MAX);
    }
}

fn rank_refs(keys: Vec<RankKey>) -> Vec<RankRef> {
    keys.into_iter()
        .map(|k| RankRef {
            job_id: k.job_id,
            rank: k.rank,
        })
        .collect()
}

/// Register, heartbeat, and register again whenever the master has forgotten this node
/// or refuses its beats (a beat that fails on the way is only sent again next period). Runs until aborted. `address` is where the master reaches our NodeAgent.
/// Every answer of the master is reported to `lease`.
///
/// Orders that come with a registration run on `main`, the agent's runtime: the session
/// runs on a thread of its own (`session::thread`), which only talks to the master.
pub async fn run_session(
    client: RegistryClient,
    node: Arc<Node>,
    address: String,
    lease: Arc<Lease>,
    main: tokio::runtime::Handle,
) {
    let mut registered_before = false;
    loop {
        let (liveness, kill_jobs) =
            register(&client, &node, &address, registered_before, &lease).await;
        if !kill_jobs.is_empty() {
            let node = Arc::clone(&node);
            main.spawn(async move { kill_dropped_jobs(&node, kill_jobs) });
        }
        registered_before = true;
        heartbeat_until_lost(&client, &node, liveness, &lease).await;
    }
}

/// Register until the master accepts. Returns the master's liveness terms and the jobs
/// the master says to kill here.
async fn register(
    client: &RegistryClient,
    node: &Node,
    address: &str,
    again: bool,
    lease: &Lease,
) -> (Liveness, Vec<u64>) {
    let mut backoff = Backoff::new();
    let resp = loop {
        let req = RegisterRequest {
            x: node.coord.x,
            y: node.coord.y,
            address: address.to_owned(),
            running: rank_refs(node.ranks.running()),
        };
        match client.clone().register(req).await {
            Ok(resp) => break resp.into_inner(),
            Err(status) => {
                note_failure(lease, &status);
                if backoff.fail() {
                    if is_final_refusal(&status) {
                        // E.g. a coordinate outside the master's mesh: a configuration
                        // error, but the master may be reconfigured, so keep trying.
                        error!(
                            attempts = backoff.failures,
                            "the master refuses this node: {}; retrying",
                            brief(&status)
                        );
                    } else {
                        warn!(
                            attempts = backoff.failures,
                            "cannot register with the master: {}; retrying",
                            brief(&status)
                        );
                    }
                } else {
                    debug!("register: {}", brief(&status));
                }
                backoff.wait().await;
            }
        }
    };
    node.order_key.set(&resp.relay_key);
    node.clock.ask_probe_max(resp.clock_probe_max_ms);
    let heartbeat = match resp.heartbeat_ms {
        0 => DEFAULT_HEARTBEAT,
        ms => Duration::from_millis(u64::from(ms.max(10))),
    };
    let node_timeout =
        (resp.node_timeout_ms > 0).then(|| Duration::from_millis(u64::from(resp.node_timeout_ms)));
    let ms = |v: u32| Duration::from_millis(u64::from(v));
    // Quiet liveness, when the master asks for it (and states what it then waits for).
    let idle = (resp.idle_heartbeat_ms > 0 && resp.idle_node_timeout_ms > 0).then(|| {
        (
            ms(resp.idle_node_timeout_ms),
            ms(resp.idle_heartbeat_ms).max(heartbeat),
        )
    });
    let liveness = Liveness {
        lease: (resp.agent_lease_ms > 0).then(|| ms(resp.agent_lease_ms)),
        node_timeout,
        heartbeat,
        idle,
    };
    lease.registered(tokio::time::Instant::now(), liveness);
    info!(
        node = %node.coord,
        %address,
        mesh = %format!("{}x{}", resp.mesh_w, resp.mesh_h),
        heartbeat_ms = heartbeat.as_millis() as u64,
        node_timeout_ms = resp.node_timeout_ms,
        agent_lease_ms = resp.agent_lease_ms,
        idle_heartbeat_ms = resp.idle_heartbeat_ms,
        idle_node_timeout_ms = resp.idle_node_timeout_ms,
        clock_probe_max_ms = resp.clock_probe_max_ms,
        running = node.ranks.running().len(),
        again,
        "registered with the master"
    );
    if node_timeout.is_none() && !again {
        warn!(
            "the master states no node timeout: this node's ranks will not be stopped however long the master stays away"
        );
    }
    (liveness, resp.kill_jobs)
}

/// The master ended or forgot these jobs while it could not tell us.
fn kill_dropped_jobs(node: &Node, jobs: Vec<u64>) {
    for job_id in jobs {
        if node.signal(job_id, node.kill_grace) {
            warn!(
                job_id,
                "the master no longer runs this job: killing its ranks here"
            );
        }
    }
}

/// Heartbeat until the master refuses one or says it does not know us: every period while
/// the node runs ranks (their activity feeds the master's deadlock check), and while it
/// runs none, every idle period if the master asked for quiet liveness.
async fn heartbeat_until_lost(
    client: &RegistryClient,
    node: &Node,
    liveness: Liveness,
    lease: &Lease,
) {
    let period = liveness.heartbeat;
    // A liveness head's answer may take a quarter of the node timeout.
    let patience = liveness
        .node_timeout
        .map_or(period * 4, |t| t / 4)
        .max(period);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sent = tokio::time::Instant::now();
    // Heartbeats failed in a row.
    let mut failed: u32 = 0;
    loop {
        ticks.tick().await;
        // The master counts this node busy until the exits of its ranks are saved; a rank
        // stays in the registry until its exit report is acknowledged, which is after that
        // save, so an empty registry means the master no longer expects the busy rate. (A
        // rank launched here while the master waits for the launch's answer: the master
        // does not judge the node until the answer comes.)
        if let Some((_, idle_period)) = liveness.idle
            && node.ranks.is_empty()
            && !node.exits.held_above()
            && !node.liveness.pending()
            && last_sent.elapsed() + period / 2 < idle_period
            && failed == 0
        {
            continue;
        }
        last_sent = tokio::time::Instant::now();
        let clock = node.clock.report();
        let req = HeartbeatRequest {
            x: node.coord.x,
            y: node.coord.y,
            running: rank_refs(node.ranks.running()),
            // Until a probe is answered: 0 and 0 (the master shows "not probed").
            clock_offset_ns: clock.offset_ns,
            clock_error_ns: clock.error_ns,
            clock_from_host: clock.from_host,
            table_version: node.switch.table_version(),
            activity: node.msg.activity(),
        };
        match crate::session::beat::send(client, node, req, (period, patience), lease).await {
            Ok(true) => failed = 0,
            Ok(false) => {
                // An answer, but not supervision: the master does not count this node as
                // up until it registers again.
                warn!("the master does not know this node (it restarted?): registering again");
                return;
            }
            Err(status) if is_final_refusal(&status) => {
                note_failure(lease, &status);
                warn!("heartbeat refused: {}; registering again", brief(&status));
                return;
            }
            Err(status) => {
                // Ranks keep running (for the lease). The next beat goes on the channel,
                // which reconnects (to whichever master leads); a master that restarted
                // and forgot this node says so, and the node registers again then. A
                // failed call says nothing of the master's memory: registering again at
                // each one made thousands of nodes of a loaded 10,000-node fleet, whose
                // TLS handshakes had timed out, register all at once (0.09 a rank).
                note_failure(lease, &status);
                failed += 1;
                if failed == 1 || failed.is_multiple_of(WARN_EVERY) {
                    warn!(
                        failed,
                        "heartbeat failed: {}; beating again next period",
                        brief(&status)
                    );
                }
                continue;
            }
        }
    }
}

/// Tell the lease how a call failed: refused by the master's host (the master is down),
/// or unanswered.
fn note_failure(lease: &Lease, status: &tonic::Status) {
    if connection_refused(status) {
        lease.refused(tokio::time::Instant::now());
    } else if !is_final_refusal(status) {
        lease.unanswered();
    }
}

/// Whether a call failed because the master's host refused the connection (nothing
/// listens there): the master is down, not cut off from us.
fn connection_refused(status: &tonic::Status) -> bool {
    gang_proto::relay::refused(status)
}

/// Deliver the outbox in order, each item until acknowledged. Runs until aborted. A clean
/// exit of a rank in a job's tree goes up the tree instead (`tree::exits_up`, whose
/// sender runs as long as this does).
pub async fn run_uplink(client: RegistryClient, node: Arc<Node>) {
    let batches = {
        let client = client.clone();
        tokio::spawn(exits_sender::run(Arc::clone(&node), move |b| {
            deliver_exits(client.clone(), b)
        }))
    };
    let _stop_batches = AbortOnDrop(batches);
    loop {
        match node.outbox.next().await {
            Outgoing::Output(pushes) => {
                for push in pushes {
                    let job_id = push.job_id;
                    deliver("output", job_id, || {
                        let (mut client, push) = (client.clone(), push.clone());
                        async move { client.push_output(push).await }
                    })
                    .await;
                }
            }
            // Its output is pushed: the exit may leave the node (forgotten once taken).
            Outgoing::Exit(exit) if node.exits.hold(&exit) => {}
            Outgoing::Exit(exit) => {
                let key = RankKey {
                    job_id: exit.job_id,
                    rank: exit.rank,
                };
                deliver("exit report", key.job_id, || {
                    let (mut client, exit) = (client.clone(), exit.clone());
                    async move { client.report_exit(exit).await }
                })
                .await;
                // Counted in its tree, where it has one: the nodes above need not wait.
                node.exits.went_direct(key.job_id, key.rank);
                // Acknowledged: the master knows; the rank is history here.
                node.ranks.forget(key);
            }
        }
        node.outbox.done();
    }
}

/// Deliver a batch of exits gathered up a job's tree, until acknowledged (or refused for
/// good).
async fn deliver_exits(client: RegistryClient, batch: RankExits) {
    deliver("exit batch", batch.job_id, || {
        let (mut client, batch) = (client.clone(), batch.clone());
        async move { client.report_exits(batch).await }
    })
    .await;
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One NTP-style four-timestamp exchange with the master (`clock::run_probes` calls it),
/// timed on CLOCK_REALTIME as close to the call as possible.
pub async fn probe_clock(mut client: RegistryClient) -> Result<Probe, String> {
    let t1 = realtime_ns();
    let resp = tokio::time::timeout(
        PROBE_TIMEOUT,
        client.clock_probe(ClockProbeRequest { t1_ns: t1 }),
    )
    .await
    .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    let t4 = realtime_ns();
    let r = resp.into_inner();
    if r.t1_ns != t1 {
        return Err("the answer echoes another probe".into());
    }
    Ok(Probe {
        t1,
        t2: r.t2_ns,
        t3: r.t3_ns,
        t4,
    })
}

/// Send one report of switch records (`switch::report::run_reports` calls it).
pub async fn report_switches(
    mut client: RegistryClient,
    report: SwitchReport,
) -> Result<(), Status> {
    client.report_switches(report).await.map(|_| ())
}

/// Answers that will not change by asking again: the master understood the request and
/// refuses it (for example a job it has no record of). Anything else (unreachable, timed
/// out, restarting, not registered yet) is retried.
fn is_final_refusal(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::OutOfRange
            | Code::Unimplemented
    )
}

async fn deliver<T, F, Fut>(what: &str, job_id: u64, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, Status>>,
{
    let mut backoff = Backoff::new();
    loop {
        match call().await {
            Ok(_) => return,
            Err(status) if is_final_refusal(&status) => {
                error!(
                    job_id,
                    "the master refused the {what}: {}; dropping it",
                    brief(&status)
                );
                return;
            }
            Err(status) => {
                if backoff.fail() {
                    warn!(
                        job_id,
                        attempts = backoff.failures,
                        "cannot deliver the {what} to the master: {}; retrying",
                        brief(&status)
                    );
                } else {
                    debug!(job_id, "deliver {what}: {}", brief(&status));
                }
                backoff.wait().await;
            }
        }
    }
}

/// A status in one line: code, message and the root cause (for a transport error the
/// useful part, e.g. "Connection refused", is several wrappers down).
fn brief(status: &Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut root = None;
    let mut cause = std::error::Error::source(status);
    while let Some(e) = cause {
        root = Some(e);
        cause = e.source();
    }
    if let Some(root) = root.map(|e| e.to_string())
        && !text.contains(&root)
    {
        text.push_str(" (");
        text.push_str(&root);
        text.push(')');
    }
    text
}
