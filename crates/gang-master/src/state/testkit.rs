//! The reactor's test harness: a [`Recorder`] of what saved rounds wrote (the "database"
//! a restart recovers from) and sent, and a [`World`] that runs each step as a round
//! through `round::run`, as the daemon does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gang_core::job::deadlock::Activity;
use gang_core::{GangMode, JobId, Shape, SlotGrid};

use crate::config::MasterConfig;
use crate::job::{JobRecord, SavedJob, Spec};
use crate::state::effects::{Coord, Effect, Effects, LaunchOrder, Metric, NodeTable, Save};
use crate::state::events::{Caller, ClockReport, Heartbeat, NewJob, Owner, Registration};
use crate::state::round::{self, Commit};
use crate::state::views::JobView;
use crate::state::{MasterState, Now, Persisted, reactor};

/// What saved rounds wrote, and what they sent, kept until a test takes it. Launches and
/// signals must all be taken (`assert_quiet`); the rest is a log for the tests that look.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Saved jobs by id: what a restarted master finds.
    pub db: BTreeMap<u64, SavedJob>,
    pub drained: BTreeSet<Coord>,
    pub table_meta: Option<(u64, SlotGrid)>,
    /// The specs arrays' tasks share, by array id.
    pub specs: std::collections::HashMap<u64, Arc<Spec>>,
    /// Every other effect, in order.
    pub sent: Vec<Effect>,
    /// Nodes whose tables are lost on the way.
    pub lossy: BTreeSet<Coord>,
    /// Tables that reached their agent, to acknowledge.
    delivered: Vec<(Coord, u64)>,
    /// Tables lost on the way, to report so.
    lost: Vec<(Coord, u64)>,
}

impl Commit for Recorder {
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String> {
        for save in saves {
            match save {
                Save::Job(job) => {
                    self.db.insert(job.id.0, (**job).clone());
                }
                Save::Drained {
                    node,
                    drained: true,
                } => {
                    self.drained.insert(*node);
                }
                Save::Drained {
                    node,
                    drained: false,
                } => {
                    self.drained.remove(node);
                }
                Save::TableMeta { version, grid } => self.table_meta = Some((*version, *grid)),
                Save::Spec { array, spec } => {
                    self.specs.insert(array.0, spec.clone());
                }
            }
        }
        Ok(())
    }
}

impl Recorder {
    /// A saved round's effects reach their agents and clients.
    fn record(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match &e {
                Effect::Save(_) => continue,
                Effect::Launch { node, address, .. }
                | Effect::Signal { node, address, .. }
                | Effect::Rank0Running { node, address, .. } => {
                    assert_eq!(*address, addr(*node), "sent to the node's agent: {e:?}");
                }
                Effect::Table {
                    node,
                    address,
                    table,
                } => {
                    assert_eq!(*address, addr(*node), "table sent to the node's agent");
                    if self.lossy.contains(node) {
                        self.lost.push((*node, table.version));
                    } else {
                        self.delivered.push((*node, table.version));
                    }
                }
                Effect::JobChanged(_) | Effect::Metric(_) | Effect::FenceDone { .. } => {}
            }
            self.sent.push(e);
        }
    }

    /// What `pick` finds in the effects sent, taken out of them.
    fn take<T>(&mut self, mut pick: impl FnMut(&Effect) -> Option<T>) -> Vec<T> {
        let mut taken = vec![];
        self.sent.retain(|e| match pick(e) {
            Some(t) => {
                taken.push(t);
                false
            }
            None => true,
        });
        taken
    }

    /// What `pick` finds in the effects sent, left there.
    fn pick<'a, T>(&'a self, pick: impl FnMut(&'a Effect) -> Option<T>) -> Vec<T> {
        self.sent.iter().filter_map(pick).collect()
    }

    pub fn take_launches(&mut self, job: JobId) -> Vec<(Coord, LaunchOrder)> {
        self.take(|e| match e {
            Effect::Launch { node, order, .. } if order.job == job => Some((*node, order.clone())),
            _ => None,
        })
    }

    pub fn take_signals(&mut self, job: JobId) -> Vec<(Coord, u32)> {
        self.take(|e| match e {
            Effect::Signal {
                node,
                job: j,
                grace_ms,
                ..
            } if *j == job => Some((*node, *grace_ms)),
            _ => None,
        })
    }

    /// Every signal sent: (node, job, grace).
    pub fn take_every_signal(&mut self) -> Vec<(Coord, JobId, u32)> {
        self.take(signal)
    }

    pub fn take_tables(&mut self) -> Vec<(Coord, NodeTable)> {
        self.take(|e| match e {
            Effect::Table { node, table, .. } => Some((*node, table.clone())),
            _ => None,
        })
    }

    /// Launches sent and not yet taken.
    pub fn launches(&self) -> Vec<(Coord, &LaunchOrder)> {
        self.pick(|e| match e {
            Effect::Launch { node, order, .. } => Some((*node, order)),
            _ => None,
        })
    }

    pub fn tables(&self) -> Vec<(Coord, &NodeTable)> {
        self.pick(|e| match e {
            Effect::Table { node, table, .. } => Some((*node, table)),
            _ => None,
        })
    }

    /// Where rank 0 of each job was announced running: (job, its agent's address).
    pub fn rank0(&self) -> Vec<(JobId, String)> {
        self.pick(|e| match e {
            Effect::Rank0Running { job, address, .. } => Some((*job, address.clone())),
            _ => None,
        })
    }

    pub fn metrics(&self) -> Vec<Metric> {
        self.pick(|e| match e {
            Effect::Metric(m) => Some(m.clone()),
            _ => None,
        })
    }

    /// Fences completed: (job, epoch, key-value space).
    pub fn fences(&self) -> Vec<(JobId, u32, Arc<crate::msg_jobs::Space>)> {
        self.pick(|e| match e {
            Effect::FenceDone { job, epoch, kvs } => Some((*job, *epoch, kvs.clone())),
            _ => None,
        })
    }

    /// Nothing was launched or signalled that the test did not expect.
    pub fn assert_quiet(&self) {
        let launches = self.launches();
        assert!(launches.is_empty(), "unexpected launches: {launches:?}");
        let signals = self.pick(signal);
        assert!(signals.is_empty(), "unexpected signals: {signals:?}");
    }
}

fn signal(e: &Effect) -> Option<(Coord, JobId, u32)> {
    match e {
        Effect::Signal {
            node,
            job,
            grace_ms,
            ..
        } => Some((*node, *job, *grace_ms)),
        _ => None,
    }
}

/// The agent address of a node in tests.
pub fn addr((x, y): Coord) -> String {
    format!("agent-{x}-{y}:1")
}

pub const QUANTUM_MS: u32 = 10;
pub const LEAD_MS: u32 = 20;
pub const NODE_TIMEOUT_MS: u32 = 2000;
pub const GRACE_MS: u32 = 3000;

pub fn config(w: u32, h: u32, mpl: u32) -> MasterConfig {
    let mut c = MasterConfig::for_test(Shape::new(w, h), "unused.db".into());
    c.mpl = mpl;
    c.quantum_ms = QUANTUM_MS;
    c.table_lead_ms = LEAD_MS;
    c.node_timeout_ms = NODE_TIMEOUT_MS;
    c.adopt_timeout_ms = NODE_TIMEOUT_MS;
    c.kill_grace_ms = GRACE_MS;
    c
}

/// A queued job's record (for tests of the job table).
pub fn record(id: u64) -> JobRecord {
    let spec = Spec {
        owner: Owner {
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
            user: "alice".into(),
        },
        name: "true".into(),
        argv: vec!["true".into()],
        cwd: "/".into(),
        env: BTreeMap::new(),
        time_limit_s: 0,
        stdin: false,
        shape: "1x1".into(),
        gang: GangMode::Stop,
        on_deadlock: Default::default(),
        msg_context: Default::default(),
        mpi: Default::default(),
        mpi_check: false,
        output_files: Default::default(),
        client_token: None,
        dependency: Vec::new(),
        allocate: false,
        allocation: None,
        pty: Default::default(),
        script: None,
        at_submit: Default::default(),
    };
    JobRecord::queued(JobId(id), Arc::new(spec), 1, 1, 0)
}

/// A caller: uid 0 is an admin (root), uid 999 an admin by configuration, others users.
pub fn caller(uid: u32) -> Caller {
    Caller {
        owner: Owner {
            uid,
            gid: uid,
            groups: vec![uid],
            user: format!("u{uid}"),
        },
        admin: uid == 0 || uid == 999,
    }
}

pub fn new_job(shape: &str, uid: u32, time_limit_s: u64) -> NewJob {
    NewJob {
        owner: Owner {
            uid,
            gid: uid,
            groups: vec![uid],
            user: format!("u{uid}"),
        },
        name: String::new(),
        argv: vec!["./a.out".into()],
        cwd: "/tmp".into(),
        env: [("GANG_MASTER".to_string(), "x".to_string())].into(),
        time_limit_s,
        stdin: false,
        shape: shape.into(),
        gang: None,
        on_deadlock: None,
        msg_context: None,
        mpi: Default::default(),
        mpi_check: false,
        output_files: Default::default(),
        client_token: None,
        dependency: Vec::new(),
        allocate: false,
        allocation: None,
        pty: Default::default(),
        script: None,
        at_submit: Default::default(),
    }
}

/// The master state, its recorder, the clock, and the agents as the master sees them.
pub struct World {
    pub st: MasterState,
    pub fx: Recorder,
    pub now: Now,
    cfg: MasterConfig,
    /// Nodes whose agents no longer heartbeat.
    pub silent: BTreeSet<Coord>,
    /// Ranks each agent runs (confirmed launches, not yet exited).
    pub running: BTreeMap<Coord, BTreeSet<(JobId, u32)>>,
    /// The newest table version each agent holds.
    pub held: BTreeMap<Coord, u64>,
    /// What each agent's messaging-library ranks report in its heartbeats.
    pub activity: BTreeMap<Coord, Vec<(JobId, Activity)>>,
    /// Each agent's clock estimate in its heartbeats (default: offset and error 0).
    pub clocks: BTreeMap<Coord, ClockReport>,
}

impl World {
    /// A master with no jobs; agents not registered yet.
    pub fn new(cfg: MasterConfig) -> Self {
        let now = Now {
            mono_ns: 1_000_000_000,
            wall_ns: 1_700_000_000_000_000_000,
            live_ns: 1_000_000_000,
        };
        World::recovered(cfg, Recorder::default(), now)
    }

    fn recovered(cfg: MasterConfig, fx: Recorder, now: Now) -> Self {
        let persisted = Persisted {
            next_job_id: fx.db.keys().max().map_or(1, |m| m + 1),
            table_version: fx.table_meta.map_or(0, |(v, _)| v),
            table_epoch_ns: fx.table_meta.map(|(_, g)| g.epoch_ns),
        };
        let records: Vec<SavedJob> = fx
            .db
            .values()
            .cloned()
            .map(|mut r| {
                crate::job::read_back::attach_spec(&mut r, &fx.specs);
                r
            })
            .collect();
        let drained: Vec<Coord> = fx.drained.iter().copied().collect();
        let mut w = World {
            st: MasterState::new(cfg.clone(), &persisted).expect("config is valid"),
            fx,
            now,
            cfg,
            silent: BTreeSet::new(),
            running: BTreeMap::new(),
            held: BTreeMap::new(),
            activity: BTreeMap::new(),
            clocks: BTreeMap::new(),
        };
        w.round(|st, fx, now| reactor::on_recover(st, fx, now, records, &drained))
            .expect("recovers");
        w
    }

    /// A master restarted from what was saved: same database, new memory; agents keep
    /// their ranks (and must register again).
    pub fn restart(self) -> Self {
        let fx = Recorder {
            db: self.fx.db,
            drained: self.fx.drained,
            table_meta: self.fx.table_meta,
            specs: self.fx.specs,
            ..Recorder::default()
        };
        fx.assert_quiet();
        let now = Now {
            mono_ns: 1_000_000_000, // a new process: its monotonic clock starts again
            wall_ns: self.now.wall_ns + 1_000_000_000,
            live_ns: 1_000_000_000,
        };
        let mut w = World::recovered(self.cfg, fx, now);
        w.running = self.running;
        w.held = self.held;
        w
    }

    pub fn advance_ms(&mut self, ms: i64) {
        self.now.mono_ns += ms * 1_000_000;
        self.now.wall_ns += ms * 1_000_000;
        self.now.live_ns += ms * 1_000_000;
    }

    /// The master itself was stopped for `ms` (SIGSTOP, a swap storm, a disk that held a
    /// commit): the clocks moved on, its responsive time did not.
    pub fn pause_ms(&mut self, ms: i64) {
        self.now.mono_ns += ms * 1_000_000;
        self.now.wall_ns += ms * 1_000_000;
    }

    /// One round (its end and the sanity check included). Tables that reached their
    /// agents are acknowledged in the next round, as agents do (silent ones do not).
    pub fn step<R>(&mut self, f: impl FnOnce(&mut MasterState, &mut Effects, Now) -> R) -> R {
        let r = self.round(f);
        // A silent agent answers nothing (an answer counts as a heartbeat).
        // A lost table's call fails, and the master hears so.
        let lost = std::mem::take(&mut self.fx.lost);
        if !lost.is_empty() {
            self.round(|st, _, _| {
                for (node, v) in lost {
                    reactor::on_table_lost(st, node, v);
                }
            });
        }
        let mut acks = std::mem::take(&mut self.fx.delivered);
        acks.retain(|(node, _)| !self.silent.contains(node));
        if !acks.is_empty() {
            for &(node, v) in &acks {
                let held = self.held.entry(node).or_default();
                *held = (*held).max(v);
            }
            self.round(|st, _, now| {
                for (node, v) in acks {
                    reactor::on_table_acked(st, now, node, v);
                }
            });
        }
        r
    }

    fn round<R>(&mut self, f: impl FnOnce(&mut MasterState, &mut Effects, Now) -> R) -> R {
        let (r, effects) = round::run(&mut self.st, &mut self.fx, self.now, f);
        self.fx
            .record(effects.expect("the recorder saves everything"));
        r
    }

    pub fn nodes(&self) -> Vec<Coord> {
        let m = self.cfg.mesh;
        (0..m.h)
            .flat_map(|y| (0..m.w).map(move |x| (x, y)))
            .collect()
    }

    /// An agent registers, listing the ranks it runs.
    pub fn register(&mut self, node: Coord) -> Vec<JobId> {
        let running = self.running.get(&node).cloned().unwrap_or_default();
        let reg = Registration {
            node,
            address: addr(node),
            running: running.into_iter().collect(),
        };
        self.silent.remove(&node);
        let done = self.step(|st, fx, now| reactor::on_register(st, fx, now, reg));
        done.expect("registered").kill_jobs
    }

    pub fn register_all(&mut self) {
        for n in self.nodes() {
            self.register(n);
        }
    }

    /// Every agent that is not silent heartbeats.
    pub fn heartbeats(&mut self) {
        for node in self.nodes() {
            if self.silent.contains(&node) {
                continue;
            }
            let hb = Heartbeat {
                node,
                running: self
                    .running
                    .get(&node)
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect(),
                clock: self.clocks.get(&node).copied().unwrap_or_default(),
                table_version: self.held.get(&node).copied().unwrap_or(0),
                activity: self.activity.get(&node).cloned().unwrap_or_default(),
            };
            self.step(|st, fx, now| reactor::on_heartbeat(st, fx, now, hb));
        }
    }

    /// Time passes (agents heartbeat every 500 ms of it), then the tick.
    pub fn tick_after_ms(&mut self, ms: i64) {
        let mut left = ms;
        while left > 0 {
            let d = left.min(500);
            self.advance_ms(d);
            left -= d;
            self.heartbeats();
        }
        self.step(reactor::on_tick);
    }

    /// The agent of `node` started the rank it was asked to launch.
    pub fn started(&mut self, node: Coord, order: &LaunchOrder) {
        let (job, rank) = (order.job, order.rank);
        self.running.entry(node).or_default().insert((job, rank));
        self.step(|st, fx, now| reactor::on_launched(st, fx, now, job, rank, Ok(1000 + rank)));
    }

    pub fn view(&self, job: u64) -> JobView {
        self.st.view(JobId(job), self.now).expect("known job")
    }
}
