//! Time slicing on this node: the slice tables the master sends (`table`), the plan built
//! from them and the local ranks (`plan`, pure), the switch thread that follows the plan
//! on the master clock (`thread`), what it does to a rank (`actions`, `freezer`), and the
//! records of its switches (`ring`, `report`).
//!
//! ```text
//!  SetTable ─┐                                 ┌──────── switch thread (SCHED_FIFO) ────────┐
//!  Launch ───┼─> Switcher (async side, Mutex) ─┤ ArcSwap<SwitchPlan>  timerfd at deadline    │
//!  exit ─────┤    tables + targets + dying     │   -offset; eventfd kick; out first, then in│
//!  Signal ───┘    └─ plan::build ─> swap+kick ─┘ ─> Ring ─> report task ─> ReportSwitches   │
//! ```
//!
//! The `Switcher` is the only way in: its methods take a std mutex (never across an
//! await), rebuild the plan off the hot path and swap it in; the thread never locks.

pub mod actions;
pub mod freezer;
pub mod plan;
pub mod report;
pub mod ring;
pub mod table;
pub mod thread;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gang_core::GangMode;
use gang_proto::v1::NodeTable;
use tracing::{info, warn};

use crate::error::Coord;
use crate::ranks::RankKey;
use crate::rt::clock::Clock;
pub use actions::MsgPages;
use actions::Target;
use freezer::{Cleanup, FreezerBase, FreezerSetting, RankCgroup};
use plan::TargetInfo;
use ring::{RING_CAPACITY, Record};
use table::{Offer, Table, Tables};
use thread::{Shared, SwitchPlan};

/// The switch thread's SCHED_FIFO priority: above every normal task, equal to the kernel's
/// threaded interrupt handlers (which it therefore does not preempt).
pub const RT_PRIORITY: i32 = 50;

/// How the switcher is set up.
#[derive(Debug, Clone)]
pub struct SwitchOptions {
    pub freezer: FreezerSetting,
    /// SCHED_FIFO priority of the switch thread; 0: normal scheduling.
    pub rt_priority: i32,
    pub ring_capacity: usize,
    /// Wake this long before each deadline and spin to it (0: none).
    pub spin: Duration,
}

impl Default for SwitchOptions {
    fn default() -> Self {
        SwitchOptions {
            freezer: FreezerSetting::Auto,
            rt_priority: RT_PRIORITY,
            ring_capacity: RING_CAPACITY,
            spin: Duration::ZERO,
        }
    }
}

#[derive(Debug, Default)]
struct Inputs {
    tables: Tables,
    targets: BTreeMap<RankKey, Arc<Target>>,
    /// Jobs being cancelled here: never switched out again.
    dying: BTreeSet<u64>,
    generation: u64,
    /// Plans swapped out that the thread may still hold.
    retired: Vec<Arc<SwitchPlan>>,
}

/// A rank about to be spawned: its freezer cgroup, if it gets one.
#[derive(Debug)]
pub struct Prepared {
    pub key: RankKey,
    pub mode: GangMode,
    /// The job the tables name it by (a step's allocation; else its own).
    pub slot_job: u64,
    pub cgroup: Option<RankCgroup>,
    /// Its messaging-library pages, if the agent made them.
    pub msg: Option<MsgPages>,
}

/// The async side of the switch path.
#[derive(Debug)]
pub struct Switcher {
    node: Coord,
    shared: Arc<Shared>,
    inputs: Mutex<Inputs>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    freezer: Option<FreezerBase>,
    base_nice: i32,
}

impl Switcher {
    /// Set up the freezer and start the switch thread.
    pub fn start(
        node: Coord,
        clock: Arc<Clock>,
        opts: &SwitchOptions,
    ) -> std::io::Result<Arc<Self>> {
        let spin_ns = i64::try_from(opts.spin.as_nanos()).unwrap_or(i64::MAX);
        let shared = Arc::new(Shared::new(clock, opts.ring_capacity, spin_ns)?);
        let freezer = FreezerBase::open(&opts.freezer, node);
        let thread = {
            let shared = Arc::clone(&shared);
            let prio = opts.rt_priority;
            std::thread::Builder::new()
                .name(format!("gang-switch-{}-{}", node.x, node.y))
                .spawn(move || thread::run(shared, prio))?
        };
        Ok(Arc::new(Switcher {
            node,
            shared,
            inputs: Mutex::default(),
            thread: Mutex::new(Some(thread)),
            freezer,
            base_nice: actions::own_nice(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inputs> {
        self.inputs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    pub fn freezer(&self) -> Option<&FreezerBase> {
        self.freezer.as_ref()
    }

    /// Whether the switch thread got real-time priority.
    pub fn realtime(&self) -> bool {
        self.shared.realtime.load(Ordering::Relaxed)
    }

    /// Rebuild the plan from the inputs, swap it in and wake the thread.
    fn rebuild(&self, inputs: &mut Inputs) {
        let now = self.shared.clock.master_now_ns();
        inputs.tables.prune(now);
        let Inputs {
            tables,
            targets,
            dying,
            generation,
            retired,
        } = inputs;
        // A cancelled job stays unmanaged while it has ranks here or a table names it.
        dying.retain(|&j| tables.names(j) || targets.keys().any(|k| k.job_id == j));
        let infos: Vec<TargetInfo> = targets
            .values()
            .map(|t| TargetInfo {
                key: t.key,
                slot_job: t.slot_job,
                mode: t.mode,
                freezer: t.cgroup.is_some(),
            })
            .collect();
        let plan = plan::build(tables.held(), &infos, dying);
        *generation += 1;
        let sp = Arc::new(SwitchPlan {
            generation: *generation,
            plan,
            targets: targets.values().cloned().collect(),
        });
        let old = self.shared.plan.swap(sp);
        retired.push(old);
        let seen = self.shared.seen_generation.load(Ordering::Acquire);
        retired.retain(|p| p.generation >= seen);
        self.shared.kick();
    }

    /// A table from the master. Returns the version now held, or why it is refused.
    pub fn set_table(&self, t: NodeTable) -> Result<u64, String> {
        let table = Table::from_proto(t)?;
        let (version, rows, effective_ns) = (table.version, table.rows.clone(), table.effective_ns);
        let mut inputs = self.lock();
        let now = self.shared.clock.master_now_ns();
        match inputs.tables.offer(table, now) {
            Offer::Accepted { from_ns, late } => {
                if late {
                    warn!(
                        version,
                        late_by_ns = now - effective_ns,
                        "slice table arrived after its effective time: applying it at the next boundary"
                    );
                }
                info!(
                    version,
                    ?rows,
                    in_ns = from_ns - now,
                    "slice table accepted"
                );
                self.rebuild(&mut inputs);
            }
            Offer::Duplicate => {}
            Offer::Stale => {
                info!(
                    version,
                    held = inputs.tables.newest_version(),
                    "older slice table ignored"
                );
            }
        }
        Ok(inputs.tables.newest_version())
    }

    /// The newest table version held (0: none).
    pub fn table_version(&self) -> u64 {
        self.lock().tables.newest_version()
    }

    /// Before spawning a rank: a freezer cgroup for a FREEZE rank where one is available.
    pub fn prepare(&self, key: RankKey, mode: GangMode, slot_job: u64) -> Prepared {
        let cgroup = match (mode, &self.freezer) {
            (GangMode::Freeze, Some(base)) => match base.create(key) {
                Ok(cg) => Some(cg),
                Err(e) => {
                    warn!(
                        job_id = key.job_id,
                        rank = key.rank,
                        "cannot create a freezer cgroup: {e}; this rank is switched with SIGSTOP/SIGCONT"
                    );
                    None
                }
            },
            (GangMode::Freeze, None) => {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    "FREEZE asked but no freezer here: switching with SIGSTOP/SIGCONT"
                );
                None
            }
            _ => None,
        };
        Prepared {
            key,
            mode,
            slot_job,
            cgroup,
            msg: None,
        }
    }

    /// The spawn failed: remove what `prepare` made.
    pub fn abandon(&self, prepared: Prepared) {
        if let Some(cg) = prepared.cgroup {
            let _ = cg.cleanup().try_remove();
        }
    }

    /// The rank runs, leading process group `pgid`: manage it.
    pub fn add(&self, mut prepared: Prepared, pgid: i32) {
        if let Some(cg) = &mut prepared.cgroup {
            cg.spawned();
        }
        let mut target = Target::new(
            prepared.key,
            prepared.mode,
            pgid,
            self.base_nice,
            prepared.cgroup,
        );
        target.msg = prepared.msg;
        target.slot_job = prepared.slot_job;
        let target = Arc::new(target);
        let mut inputs = self.lock();
        inputs.targets.insert(prepared.key, target);
        self.rebuild(&mut inputs);
    }

    /// Switch-outs of messaging-library ranks so far: (quiesced in time, not).
    pub fn msg_switch_outs(&self) -> (u64, u64) {
        (
            self.shared.msg_flushed.load(Ordering::Relaxed),
            self.shared.msg_unflushed.load(Ordering::Relaxed),
        )
    }

    /// The rank was reaped: stop managing it, and thaw its cgroup so that what is left
    /// in it can be killed. Returns the cgroup to remove once its group is killed.
    pub fn rank_ended(&self, key: RankKey) -> Option<Cleanup> {
        let target = {
            let mut inputs = self.lock();
            let target = inputs.targets.remove(&key)?;
            self.rebuild(&mut inputs);
            target
        };
        let cg = target.cgroup.as_ref()?;
        let _ = cg.set_frozen(false);
        Some(cg.cleanup())
    }

    /// Cancel: the job leaves management at once and its ranks here are continued
    /// (SIGCONT, thawed, nice restored) so that they can act on the SIGTERM that follows.
    pub fn release_job(&self, job_id: u64) {
        let released: Vec<Arc<Target>> = {
            let mut inputs = self.lock();
            inputs.dying.insert(job_id);
            let released = inputs
                .targets
                .iter()
                .filter(|(k, _)| k.job_id == job_id)
                .map(|(_, t)| Arc::clone(t))
                .collect();
            self.rebuild(&mut inputs);
            released
        };
        // The thread also switches them in when it takes the new plan; doing it here too
        // makes it immediate.
        for t in released {
            t.release();
        }
    }

    /// Shutdown: stop the switch thread, then continue every rank (a frozen rank cannot
    /// even die of SIGKILL).
    pub async fn stop_and_release_all(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let joined = tokio::task::spawn_blocking(move || handle.join());
            if tokio::time::timeout(Duration::from_secs(2), joined)
                .await
                .is_err()
            {
                warn!("the switch thread did not stop in time");
            }
        }
        let targets: Vec<Arc<Target>> = self.lock().targets.values().cloned().collect();
        for t in targets {
            t.release();
        }
    }

    /// Synchronous variant of `stop_and_release_all` (benches, drop paths).
    pub fn stop_blocking(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        let targets: Vec<Arc<Target>> = self.lock().targets.values().cloned().collect();
        for t in targets {
            t.release();
        }
    }

    /// After every rank is gone: remove this agent's freezer directory.
    pub async fn finish(&self) {
        if let Some(f) = &self.freezer {
            f.remove().await;
        }
    }

    /// Wake the switch thread (the clock offset moved).
    pub fn kick(&self) {
        self.shared.kick();
    }

    /// Take the switch records made so far (oldest first) and the number dropped since
    /// the last call.
    pub fn drain_records(&self, out: &mut Vec<Record>) -> u64 {
        self.shared.ring.drain(out);
        self.shared.ring.take_dropped()
    }

    /// Boundaries at which the thread acted, so far.
    pub fn switches(&self) -> u64 {
        self.shared.switches.load(Ordering::Relaxed)
    }

    /// Failed actions so far, and the last errno.
    pub fn errors(&self) -> (u64, i32) {
        (
            self.shared.errors.load(Ordering::Relaxed),
            self.shared.last_errno.load(Ordering::Relaxed),
        )
    }

    /// Whether the switch thread holds the newest plan (it has taken every change).
    pub fn plan_taken(&self) -> bool {
        self.shared.seen_generation.load(Ordering::Acquire) == self.lock().generation
    }

    /// Whether the thread last left this rank switched out (tests, diagnostics).
    pub fn is_switched_out(&self, key: RankKey) -> Option<bool> {
        self.lock().targets.get(&key).map(|t| t.is_out())
    }

    pub fn node(&self) -> Coord {
        self.node
    }
}

impl Drop for Switcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
    }
}
