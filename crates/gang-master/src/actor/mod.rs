//! The one task that owns the master's state. gRPC handlers send it [`Cmd`]s and await the
//! reply; network calls run in spawned tasks that report back with another command, so the
//! task never awaits anything but its queue.
//!
//! Commands are taken in rounds. A round reads the clock once and runs the reactor through
//! `state::round::run`, which commits its saves in one SQLite transaction; only then do
//! replies, network calls and announcements go out (`daemon.rs`). If the transaction
//! fails, the whole round is taken back: every reply of the round is `UNAVAILABLE: state
//! not saved: ...` and nothing of it stays, in memory or on disk. Outcomes of network
//! calls in such a round are handled again with the next one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gang_core::JobId;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, error, info};

use crate::agents::AgentPool;
use crate::config::MasterConfig;
use crate::error::{MasterError, Result};
use crate::metrics::Metrics;
use crate::state::effects::{Coord, Effects};
use crate::state::events::{
    Caller, FenceArrival, Heartbeat, JobUpdate, LaunchFailure, ListFilter, NewJob, RankExit,
    Registered, Registration,
};
use crate::state::queries::Listed;
use crate::state::views::{JobView, MatrixView, NodeView, NodesView, Rank0, TableInForce};
use crate::state::{MasterState, Now, reactor, round};

mod calls;
mod daemon;
pub mod progress;
mod relays;
#[cfg(test)]
mod tests;
use crate::persistence::{Initial, StateStore};

type Reply<T> = oneshot::Sender<Result<T>>;

/// Commands handled in one round at most (one transaction, one fsync).
const MAX_ROUND: usize = 512;
/// A round longer than this is logged.
const SLOW_ROUND: Duration = Duration::from_millis(500);
/// Jobs a round's submissions may make at most: a round takes commands until they would
/// pass it (an array counts its tasks), so no round is the work of hundreds of arrays.
const MAX_ROUND_JOBS: usize = 2048;
/// How often the tick runs (timeouts, run time, time limits).
const TICK: Duration = Duration::from_millis(100);
/// The most the master's responsive time (`Now::live_ns`) moves between two rounds: a
/// tick and a loaded host's scheduling delay. A longer gap is the master's own stall (it
/// was stopped, swapped, held by a disk or by a long round): heartbeats could not be
/// heard then, so that time is nobody's silence.
const LIVE_STEP_MAX: Duration = Duration::from_millis(300);

pub enum Cmd {
    Submit(Box<NewJob>, Reply<JobView>),
    Cancel(JobId, Caller, Reply<JobView>),
    UpdateJob(JobUpdate, Caller, Reply<JobView>),
    GetJob(JobId, Caller, Reply<JobView>),
    ListJobs(ListFilter, Caller, Reply<Listed>),
    /// Where rank 0 of a job runs now (for stdin).
    Rank0(JobId, Reply<Rank0>),
    Register(Registration, Reply<Registered>),
    Heartbeat(Heartbeat, Reply<bool>),
    /// Heartbeats from one agent: its own, and a liveness head's children's, each with
    /// how long ago (ms) the head heard it (`reactor::on_beats`).
    Beats(
        Coord,
        Vec<(Heartbeat, u32)>,
        Reply<Vec<reactor::BeatAnswer>>,
    ),
    RankExit(RankExit, Reply<()>),
    /// A batch of exits gathered up a job's tree: applied in one round.
    RankExits(Vec<RankExit>, Reply<()>),
    ListNodes(Reply<NodesView>),
    SetDrained(Coord, bool, Caller, Reply<NodeView>),
    Matrix(Reply<MatrixView>),
    TableInForce(Reply<Option<TableInForce>>),
    /// Agents acknowledged slice tables (a relayed subtree's at once): node, version.
    TablesAcked(Vec<(Coord, u64)>),
    /// Slice tables that did not reach their agents: node, version.
    TablesLost(Vec<(Coord, u64)>),
    /// Launches finished (a relayed subtree's at once): each rank's pid, or why it did
    /// not start.
    Launched(JobId, Vec<(u32, std::result::Result<u32, LaunchFailure>)>),
    /// A rank's fence: answered once every rank of its job arrived.
    Fence(FenceArrival, Reply<Kvs>),
    Tick,
}

/// A job's key-value space, as a fence answers it (shared by the fence's answers).
pub type Kvs = std::sync::Arc<crate::msg_jobs::Space>;

/// How the gRPC side talks to the state task.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Cmd>,
    events: broadcast::Sender<JobView>,
    rank0: broadcast::Sender<(JobId, Coord, String)>,
}

impl Handle {
    pub async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .await
            .map_err(|_| MasterError::ShuttingDown)?;
        rx.await.map_err(|_| MasterError::ShuttingDown)?
    }

    /// Job changes, as they are committed.
    pub fn events(&self) -> broadcast::Receiver<JobView> {
        self.events.subscribe()
    }

    /// Rank 0 of a job started running, and where.
    pub fn rank0_started(&self) -> broadcast::Receiver<(JobId, Coord, String)> {
        self.rank0.subscribe()
    }
}

/// Open the database, recover every job, and start the state task. The task ends only if
/// it fails (it panics on an inconsistent state in debug builds): the caller must treat
/// its end as fatal.
pub fn start(
    cfg: MasterConfig,
    metrics: Arc<Metrics>,
    agents: Arc<AgentPool>,
    (store, initial): (StateStore, Initial),
) -> anyhow::Result<(Handle, JoinHandle<()>)> {
    let Initial {
        cluster_id,
        persisted,
        records,
        drained,
    } = initial;
    let (tx, rx) = mpsc::channel(4096);
    let (events, _) = broadcast::channel(4096);
    let (rank0, _) = broadcast::channel(1024);
    let mut actor = Actor {
        st: MasterState::new(cfg, &persisted)?,
        store,
        agents,
        cluster_id,
        metrics,
        handle: Handle {
            tx: tx.clone(),
            events,
            rank0,
        },
        started: Instant::now(),
        live: LiveClock::default(),
        retry: vec![],
        nodes_counted: None,
        fences: HashMap::new(),
    };
    // Recovery is a round like any other: saved whole, or the master does not start.
    let now = actor.now();
    let (recovered, saved) = round::run(&mut actor.st, &mut actor.store, now, |st, fx, now| {
        reactor::on_recover(st, fx, now, records, &drained)
    });
    let recovered = recovered.map_err(|e| anyhow::anyhow!("cannot recover the state: {e}"))?;
    let effects = saved.map_err(|e| anyhow::anyhow!("cannot save the recovered state: {e}"))?;
    debug!(?recovered, "recovery saved");
    actor.carry_out(effects);
    actor.update_gauges();
    let handle = actor.handle.clone();
    let task = tokio::spawn(actor.run(rx));
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            if tx.send(Cmd::Tick).await.is_err() {
                break;
            }
        }
    });
    Ok((handle, task))
}

struct Actor {
    st: MasterState,
    store: StateStore,
    agents: Arc<AgentPool>,
    /// This state database's id, in jobs' MPI namespace names.
    cluster_id: Arc<str>,
    metrics: Arc<Metrics>,
    handle: Handle,
    /// The origin of the monotonic clock (`Now::mono_ns`).
    started: Instant,
    live: LiveClock,
    /// Outcomes of network calls from a round that was not saved: handled again.
    retry: Vec<Cmd>,
    /// When the nodes-up gauge was last counted.
    nodes_counted: Option<Instant>,
    /// Ranks waiting in a fence, by job and epoch (answered by `Effect::FenceDone`, or with
    /// an error when their job ends).
    fences: HashMap<(JobId, u32), Vec<Reply<Kvs>>>,
}

/// A reply held until its round is saved (`None`) or not (`Some(why)`).
type Pending = Box<dyn FnOnce(Option<&str>) + Send>;

fn defer<T: Send + 'static>(out: &mut Vec<Pending>, tx: Reply<T>, r: Result<T>) {
    out.push(Box::new(move |failed: Option<&str>| {
        let r = match failed {
            None => r,
            Some(why) => Err(MasterError::NotSaved(why.to_string())),
        };
        let _ = tx.send(r);
    }));
}

impl Actor {
    fn now(&mut self) -> Now {
        let mono_ns = self.started.elapsed().as_nanos() as i64;
        Now {
            mono_ns,
            wall_ns: wall_ns(),
            live_ns: self.live.at(mono_ns),
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        while let Some(first) = rx.recv().await {
            let mut round = std::mem::take(&mut self.retry);
            let mut jobs = weight(&first);
            round.push(first);
            while round.len() < MAX_ROUND && jobs < MAX_ROUND_JOBS {
                match rx.try_recv() {
                    Ok(c) => {
                        jobs += weight(&c);
                        round.push(c);
                    }
                    Err(_) => break,
                }
            }
            self.round(ticks_last(round));
        }
        info!("state task stopped");
    }

    fn round(&mut self, round: Vec<Cmd>) {
        let started = Instant::now();
        let commands = round.len();
        self.round_inner(round);
        let took = started.elapsed();
        self.metrics.round_seconds.observe(took.as_secs_f64());
        let us = took.as_micros() as i64;
        if us > self.metrics.round_max_us.get() {
            self.metrics.round_max_us.set(us);
        }
        if took > SLOW_ROUND {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                commands,
                "a round of the state task took long: nothing else was answered meanwhile"
            );
        }
    }

    fn round_inner(&mut self, round: Vec<Cmd>) {
        let now = self.now();
        let (out, saved) = round::run(&mut self.st, &mut self.store, now, |st, fx, now| {
            let mut out = Outcomes::default();
            for cmd in round {
                handle(st, fx, now, cmd, &mut out);
            }
            out
        });
        match saved {
            Ok(effects) => {
                for r in out.replies {
                    r(None);
                }
                for (key, tx) in out.waiting {
                    // A rank's agent asks again after losing its connection (its call
                    // gone with it): the abandoned waits go.
                    let waiters = self.fences.entry(key).or_default();
                    waiters.retain(|w| !w.is_closed());
                    waiters.push(tx);
                }
                self.carry_out(effects);
                self.update_gauges();
            }
            Err(why) => {
                error!(error = %why, replies = out.replies.len(), "batch not saved: answered with errors, nothing of it applied");
                for r in out.replies {
                    r(Some(&why));
                }
                for (_, tx) in out.waiting {
                    let _ = tx.send(Err(MasterError::NotSaved(why.clone())));
                }
                self.retry = out.again;
            }
        }
    }

    fn update_gauges(&mut self) {
        let (queued, running, slices) = self.st.job_gauges();
        self.metrics.jobs_queued.set(queued as i64);
        self.metrics.jobs_running.set(running as i64);
        self.metrics.slices.set(slices as i64);
        // Nodes up walks every node: once a tick, not every round (at 10,000 nodes that
        // walk after each round was a tenth of the master's CPU during launches). A
        // round comes at least every tick, so the gauge is at most two ticks old.
        if self.nodes_counted.is_none_or(|t| t.elapsed() >= TICK) {
            self.nodes_counted = Some(Instant::now());
            self.metrics.nodes_up.set(self.st.nodes_up() as i64);
        }
    }
}

/// The master's responsive time: monotonic time, but a gap between two rounds longer
/// than `LIVE_STEP_MAX` counts only that much. The tick guarantees a round every `TICK`
/// while the master runs, so a longer gap is time it was not running.
#[derive(Debug, Default)]
struct LiveClock {
    last_mono_ns: i64,
    live_ns: i64,
}

impl LiveClock {
    fn at(&mut self, mono_ns: i64) -> i64 {
        let step = (mono_ns - self.last_mono_ns).clamp(0, LIVE_STEP_MAX.as_nanos() as i64);
        self.live_ns += step;
        self.last_mono_ns = self.last_mono_ns.max(mono_ns);
        self.live_ns
    }
}

/// Where a round's command outcomes go: replies held until the round is saved, network
/// outcomes to handle again if it is not, and fence waiters to keep once it is.
#[derive(Default)]
struct Outcomes {
    replies: Vec<Pending>,
    again: Vec<Cmd>,
    waiting: Vec<((JobId, u32), Reply<Kvs>)>,
}

/// One command through the reactor; its reply is held until the round is saved. Outcomes
/// of network calls go to `again`, to be handled again if the round is not saved.
fn handle(st: &mut MasterState, fx: &mut Effects, now: Now, cmd: Cmd, out: &mut Outcomes) {
    let Outcomes {
        replies,
        again,
        waiting,
    } = out;
    match cmd {
        Cmd::Fence(arrival, tx) => {
            let key = (arrival.job, arrival.epoch);
            match reactor::on_fence(st, fx, now, arrival) {
                Ok(None) => waiting.push((key, tx)),
                r => defer(replies, tx, r.map(|kvs| kvs.unwrap_or_default())),
            }
        }
        Cmd::Submit(job, tx) => defer(replies, tx, reactor::on_submit(st, fx, now, *job)),
        Cmd::Cancel(job, caller, tx) => {
            defer(replies, tx, reactor::on_cancel(st, fx, now, job, &caller))
        }
        Cmd::UpdateJob(update, caller, tx) => defer(
            replies,
            tx,
            reactor::on_update(st, fx, now, &caller, update),
        ),
        Cmd::GetJob(job, caller, tx) => defer(replies, tx, st.view_for(&caller, job, now)),
        Cmd::ListJobs(filter, caller, tx) => {
            defer(replies, tx, Ok(st.list_for(&caller, &filter, now)))
        }
        Cmd::Rank0(job, tx) => defer(replies, tx, st.rank0(job)),
        Cmd::Register(reg, tx) => defer(replies, tx, reactor::on_register(st, fx, now, reg)),
        Cmd::Heartbeat(hb, tx) => defer(replies, tx, Ok(reactor::on_heartbeat(st, fx, now, hb))),
        Cmd::Beats(from, beats, tx) => {
            defer(replies, tx, Ok(reactor::on_beats(st, fx, now, from, beats)))
        }
        Cmd::RankExit(exit, tx) => {
            reactor::on_rank_exit(st, fx, now, exit);
            defer(replies, tx, Ok(()));
        }
        Cmd::RankExits(exits, tx) => {
            reactor::on_rank_exits(st, fx, now, exits);
            defer(replies, tx, Ok(()));
        }
        Cmd::ListNodes(tx) => defer(replies, tx, Ok(st.nodes_view())),
        Cmd::SetDrained(node, drained, caller, tx) => defer(
            replies,
            tx,
            reactor::on_set_drained(st, fx, now, node, drained, &caller),
        ),
        Cmd::Matrix(tx) => defer(replies, tx, Ok(st.matrix_view(now))),
        Cmd::TableInForce(tx) => defer(replies, tx, Ok(st.table_in_force(now))),
        Cmd::TablesAcked(acks) => {
            for &(node, version) in &acks {
                reactor::on_table_acked(st, now, node, version);
            }
            again.push(Cmd::TablesAcked(acks));
        }
        Cmd::TablesLost(lost) => {
            for &(node, version) in &lost {
                reactor::on_table_lost(st, node, version);
            }
            again.push(Cmd::TablesLost(lost));
        }
        Cmd::Launched(job, results) => {
            reactor::on_launches(st, fx, now, job, &results);
            again.push(Cmd::Launched(job, results));
        }
        Cmd::Tick => reactor::on_tick(st, fx, now),
    }
}

/// How many jobs a command may make: an array's tasks, one for any other submission (and
/// for every other command, whose work is bounded by a page or a node).
fn weight(cmd: &Cmd) -> usize {
    match cmd {
        Cmd::Submit(job, _) => job.at_submit.array.as_ref().map_or(1, |a| a.tasks.len()),
        _ => 1,
    }
}

/// The round with its ticks (several, after the task was held up) replaced by one at the
/// end: node timeouts are then judged after every heartbeat that waited in the queue with
/// them, so a master that fell behind never counts its own delay against the agents.
fn ticks_last(round: Vec<Cmd>) -> Vec<Cmd> {
    let (ticks, mut rest): (Vec<Cmd>, Vec<Cmd>) =
        round.into_iter().partition(|c| matches!(c, Cmd::Tick));
    if !ticks.is_empty() {
        rest.push(Cmd::Tick);
    }
    rest
}

/// Wall-clock nanoseconds since the Unix epoch (the master clock agents follow).
pub fn wall_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
