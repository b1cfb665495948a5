//! Time slicing end to end on one agent: slice tables over gRPC, the clock probed from a
//! "master" whose clock runs ahead, real processes switched out and in, observed in
//! /proc. Each test has its own node coordinate (and so its own freezer directory).

#[path = "../common/mod.rs"]
mod common;
mod modes;
mod tables;

use std::time::Duration;

use common::*;
use gang_agent::AgentHandle;
use gang_agent::rt::clock::{ClockMode, realtime_ns};
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{GangMode, NodeTable, SignalRequest, SwitchRecord};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;

const MS: i64 = 1_000_000;
/// Samples this close to a slot boundary are not judged (the switch takes some time, and
/// the sample itself is not instantaneous).
const MARGIN: i64 = 5 * MS;
/// The cgroup freezer completes asynchronously (the kernel stops each task at its next
/// return to user space, and reports `frozen` later): on a loaded host a busy task has
/// been seen running 6.5 ms into the slot after its freeze was written.
const FREEZE_MARGIN: i64 = 15 * MS;
const BUSY: &str = "while :; do :; done";
/// CPU time a switched-out process may take between two samples while the kernel stops it
/// (it runs no user code); a process that really ran would show a tick's worth or more.
const STOP_CPU: i64 = 300_000;

struct Setup {
    registry: TestRegistry,
    agent: AgentHandle,
    client: NodeAgentClient<Channel>,
    /// How far the "master" clock is ahead of the host's.
    ahead: i64,
}

impl Setup {
    async fn start(x: u32, y: u32, ahead: i64, clock: ClockMode) -> Setup {
        Self::start_spinning(x, y, ahead, clock, Duration::ZERO).await
    }

    /// With the switch thread waking `spin` early and spinning to each deadline.
    async fn start_spinning(x: u32, y: u32, ahead: i64, clock: ClockMode, spin: Duration) -> Setup {
        let registry = TestRegistry::start_with(MasterOptions {
            clock_ahead_ns: ahead,
            ..MasterOptions::default()
        })
        .await;
        let mut cfg = registry.pki.agent_config(&registry, x, y);
        cfg.clock = clock;
        cfg.switch_spin = spin;
        cfg.kill_grace = Duration::from_millis(3000);
        let agent = gang_agent::start(cfg).await.expect("agent starts");
        let client = registry.pki.master_client(agent.addr, x, y).await;
        let s = Setup {
            registry,
            agent,
            client,
            ahead: if clock == ClockMode::Host { 0 } else { ahead },
        };
        if clock == ClockMode::Probe {
            let c = std::sync::Arc::clone(&s.agent.node.clock);
            wait_until("the clock to follow the master", || {
                let r = c.report();
                r.synced && (r.offset_ns - ahead).abs() <= r.error_ns + MS
            })
            .await;
        }
        s
    }

    /// The master clock now (as the test knows it: exactly).
    fn now(&self) -> i64 {
        realtime_ns() + self.ahead
    }

    async fn launch(&mut self, job_id: u64, mode: GangMode, script: &str) -> u32 {
        let mut req = launch_req(job_id, 0, &["sh", "-c", script], "/");
        req.gang = mode as i32;
        self.client.launch(req).await.unwrap().into_inner().pid
    }

    async fn set_table(&mut self, t: NodeTable) -> Result<u64, tonic::Status> {
        self.client
            .set_table(t)
            .await
            .map(|r| r.into_inner().version)
    }

    async fn signal(&mut self, job_id: u64, grace_ms: u32) -> bool {
        self.client
            .signal(SignalRequest { job_id, grace_ms })
            .await
            .unwrap()
            .into_inner()
            .found
    }

    /// Sleep until the master clock reaches `t`.
    async fn sleep_until(&self, t: i64) {
        let d = t - self.now();
        if d > 0 {
            tokio::time::sleep(Duration::from_nanos(d as u64)).await;
        }
    }

    /// Sample `read` on each pid from `from` to `until` (master clock), about every ms.
    async fn sample<V>(
        &self,
        pids: &[u32],
        from: i64,
        until: i64,
        read: impl Fn(u32) -> V,
    ) -> Vec<Sample<V>> {
        self.sleep_until(from).await;
        let mut out = Vec::new();
        while self.now() < until {
            let t0 = self.now();
            let values = pids.iter().map(|&p| read(p)).collect();
            let t1 = self.now();
            out.push(Sample { t0, t1, values });
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        out
    }

    /// When the agent finished each switch up to `until` (a boundary within `q` of it
    /// included), by deadline, as its records say once they have been reported.
    async fn switched(&self, until: i64, q: i64) -> Switched {
        self.registry
            .wait_for("the switch records of the samples", |events| {
                let done: Switched = events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Switches(r) => Some(r.records.iter()),
                        _ => None,
                    })
                    .flatten()
                    .map(|r| (r.deadline_ns, r.last_signal_ns))
                    .collect();
                done.keys()
                    .next_back()
                    .is_some_and(|&last| last > until - q)
                    .then_some(done)
            })
            .await
    }

    /// The switch records the agent reported so far.
    fn records(&self) -> Vec<SwitchRecord> {
        self.registry
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Switches(r) => Some(r.records),
                _ => None,
            })
            .flatten()
            .collect()
    }

    async fn wait_records(&self, what: &str, n: usize, version: u64) -> Vec<SwitchRecord> {
        self.registry
            .wait_for(what, |events| {
                let recs: Vec<SwitchRecord> = events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Switches(r) => Some(r.records.clone()),
                        _ => None,
                    })
                    .flatten()
                    .filter(|r| r.table_version == version)
                    .collect();
                (recs.len() >= n).then_some(recs)
            })
            .await
    }
}

struct Sample<V> {
    t0: i64,
    t1: i64,
    values: Vec<V>,
}

/// Tables carry no modes: each job's comes with its launch.
fn node_table(
    version: u64,
    epoch_ns: i64,
    quantum_ns: i64,
    effective_ns: i64,
    rows: &[u64],
) -> NodeTable {
    NodeTable {
        version,
        epoch_ns,
        quantum_ns,
        effective_ns,
        rows: rows.to_vec(),
        parked: vec![],
    }
}

/// The first multiple of `q` at least `lead` after `now`.
fn grid_after(now: i64, lead: i64, q: i64) -> i64 {
    (now + lead).div_euclid(q) * q + q
}

/// When each switch was done (its last signal), by its deadline, on the agent's estimate
/// of the master clock.
type Switched = std::collections::BTreeMap<i64, i64>;

/// Whether a sample in `slot` (beginning at `boundary`) is judged: it was taken `margin`
/// after the boundary and after the agent finished that switch (a switch that was late on
/// a loaded host is judged by its records' latency, not here), and `margin` before the next.
fn judged_in_slot(
    s: &Sample<impl Sized>,
    margin: i64,
    boundary: i64,
    q: i64,
    switched: &Switched,
) -> bool {
    s.t0 - margin >= switch_done(switched, boundary) && s.t1 + margin < boundary + q
}

/// The agent switched at every boundary in `from..until`, at the median within 5 ms of it.
fn assert_switched_on_time(switched: &Switched, from: i64, until: i64) {
    let mut late: Vec<i64> = switched
        .range(from..until)
        .map(|(d, done)| done - d)
        .collect();
    assert!(
        late.len() >= 5,
        "only {} switches recorded: {switched:?}",
        late.len()
    );
    late.sort_unstable();
    assert!(late[0] >= 0, "switched before the deadline: {switched:?}");
    let median = late[late.len() / 2];
    assert!(
        median < 5 * MS,
        "median switch latency {median} ns: {late:?}"
    );
}

fn switch_done(switched: &Switched, boundary: i64) -> i64 {
    switched
        .get(&boundary)
        .copied()
        .unwrap_or(boundary)
        .max(boundary)
}

/// Judge samples against a table: in each sample not within MARGIN of a boundary, the job
/// of the running row must satisfy `runs` and every other listed job `!runs`. Returns
/// (judged, violations as text). For values the switch sets synchronously (nice).
fn judge<V: std::fmt::Debug>(
    samples: &[Sample<V>],
    switched: &Switched,
    jobs: &[u64],
    epoch: i64,
    q: i64,
    rows: &[u64],
    runs: impl Fn(&V) -> bool,
) -> (usize, Vec<String>) {
    let slot = |t: i64| (t - epoch).div_euclid(q);
    let mut judged = 0;
    let mut bad = Vec::new();
    for s in samples {
        let a = slot(s.t0 - MARGIN);
        if a < 0 || !judged_in_slot(s, MARGIN, epoch + a * q, q, switched) {
            continue;
        }
        judged += 1;
        let row = rows[(a as usize) % rows.len()];
        for (job, v) in jobs.iter().zip(&s.values) {
            if runs(v) != (*job == row) {
                bad.push(format!(
                    "slot {a} (row job {row}) at +{:.3} ms into it: job {job} is {v:?}",
                    (s.t0 - (epoch + a * q)) as f64 / 1e6
                ));
            }
        }
    }
    (judged, bad)
}

/// A process's state letter and CPU time.
fn state_and_cpu(pid: u32) -> (Option<char>, Option<i64>) {
    (proc_state(pid), proc_run_ns(pid))
}

/// Judge process states against a table, as `judge`: the job of the running row must be
/// in a state `runs` accepts; every other job must be switched out: in a state `out`
/// accepts, or runnable (R) without having run since the previous sample. A process
/// waiting for a CPU acts on SIGSTOP, or enters the freezer, only once it gets one: until
/// then /proc shows it R, but it does not execute; when it gets the CPU the kernel stops
/// it before any user code runs, at a cost of microseconds of CPU time (tolerated: up to
/// `STOP_CPU` per sample).
#[allow(clippy::too_many_arguments)] // a test's judge: each argument is one of its facts
fn judge_states(
    samples: &[Sample<(Option<char>, Option<i64>)>],
    switched: &Switched,
    margin: i64,
    jobs: &[u64],
    epoch: i64,
    q: i64,
    rows: &[u64],
    runs: impl Fn(char) -> bool,
    out: impl Fn(char) -> bool,
) -> (usize, Vec<String>) {
    let slot = |t: i64| (t - epoch).div_euclid(q);
    let mut judged = 0;
    let mut bad = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let a = slot(s.t0 - margin);
        if a < 0 || i == 0 || !judged_in_slot(s, margin, epoch + a * q, q, switched) {
            continue;
        }
        // The previous sample tells whether an R process ran meanwhile, if it was taken in
        // this slot after the switch (the sampler itself may be descheduled for a while).
        let prev = &samples[i - 1];
        let boundary = epoch + a * q;
        let prev_ok =
            slot(prev.t0) == a && prev.t0 >= switch_done(switched, boundary).max(boundary + MS);
        judged += 1;
        let row = rows[(a as usize) % rows.len()];
        for (j, (job, (state, cpu))) in jobs.iter().zip(&s.values).enumerate() {
            let Some(state) = *state else {
                bad.push(format!("job {job} vanished"));
                continue;
            };
            let ran = match (cpu, prev.values[j].1) {
                (Some(now), Some(before)) if prev_ok => now - before,
                _ => i64::MAX,
            };
            let ok = if *job == row {
                runs(state)
            } else {
                // R with no previous sample to compare: cannot be judged, let it pass.
                out(state) || (state == 'R' && (ran <= STOP_CPU || !prev_ok))
            };
            if !ok {
                bad.push(format!(
                    "slot {a} (row job {row}) at +{:.3} ms into it: job {job} is {state}, cpu {:?} -> {:?}",
                    (s.t0 - (epoch + a * q)) as f64 / 1e6,
                    prev.values[j].1,
                    cpu
                ));
            }
        }
    }
    (judged, bad)
}

fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.split_once(":freezer:").map(|(_, p)| p.to_owned()))
}
