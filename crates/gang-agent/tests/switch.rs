//! Time slicing end to end on one agent: slice tables over gRPC, the clock probed from a
//! "master" whose clock runs ahead, real processes switched out and in, observed in
//! /proc. Each test has its own node coordinate (and so its own freezer directory).

mod common;

use std::time::Duration;

use common::*;
use gang_agent::AgentHandle;
use gang_agent::clock::{ClockMode, realtime_ns};
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
    }
}

/// The first multiple of `q` at least `lead` after `now`.
fn grid_after(now: i64, lead: i64, q: i64) -> i64 {
    (now + lead).div_euclid(q) * q + q
}

/// Judge samples against a table: in each sample not within MARGIN of a boundary, the job
/// of the running row must satisfy `runs` and every other listed job `!runs`. Returns
/// (judged, violations as text). For values the switch sets synchronously (nice).
fn judge<V: std::fmt::Debug>(
    samples: &[Sample<V>],
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
        let (a, b) = (slot(s.t0 - MARGIN), slot(s.t1 + MARGIN));
        if a != b || a < 0 {
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
fn judge_states(
    samples: &[Sample<(Option<char>, Option<i64>)>],
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
        let (a, b) = (slot(s.t0 - MARGIN), slot(s.t1 + MARGIN));
        if a != b || a < 0 || i == 0 {
            continue;
        }
        // The previous sample tells whether an R process ran meanwhile, if it was taken in
        // this slot after the switch (the sampler itself may be descheduled for a while).
        let prev = &samples[i - 1];
        let prev_ok = slot(prev.t0) == a && prev.t0 >= epoch + a * q + MS;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_mode_jobs_alternate_on_the_master_clock() {
    // The master clock is 2 s ahead: switching at the right instants proves the offset
    // is estimated and applied. The thread wakes early and spins to each deadline.
    let mut s = Setup::start_spinning(
        3,
        0,
        2_000 * MS,
        ClockMode::Probe,
        Duration::from_micros(300),
    )
    .await;
    let q = 40 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, BUSY).await;
    // Not in the table: left running.
    let p3 = s.launch(3, GangMode::Stop, "sleep 30").await;
    let epoch = grid_after(s.now(), 200 * MS, q);
    assert_eq!(
        s.set_table(node_table(1, epoch, q, epoch, &rows))
            .await
            .unwrap(),
        1
    );
    // Job 2 starts after its table is in force: it is brought into step at once.
    s.sleep_until(epoch + q / 2).await;
    let p2 = s.launch(2, GangMode::Stop, BUSY).await;
    let from = s.now() + MARGIN;
    let samples = s
        .sample(&[p1, p2, p3], from, from + 1_200 * MS, state_and_cpu)
        .await;
    let (judged, bad) = judge_states(
        &samples,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st != 'T',
        |st| st == 'T',
    );
    assert!(judged >= 100, "only {judged} samples judged");
    assert!(
        bad.is_empty(),
        "{} of {judged} wrong: {:#?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    for (i, job) in [(0, 1), (1, 2)] {
        assert!(
            samples.iter().any(|x| x.values[i].0 == Some('T')),
            "job {job} never stopped"
        );
        assert!(
            samples.iter().any(|x| x.values[i].0 == Some('R')),
            "job {job} never ran"
        );
    }
    assert!(
        samples.iter().all(|x| x.values[2].0 != Some('T')),
        "job 3 (not in the table) was stopped"
    );

    // The records: on the grid, stop+continue each, soon after the deadline.
    let recs = s.wait_records("20 switch records", 20, 1).await;
    let mut latencies: Vec<i64> = Vec::new();
    for r in &recs {
        assert_eq!((r.deadline_ns - epoch).rem_euclid(q), 0, "{r:?}");
        assert_eq!(r.slot, (r.deadline_ns - epoch) / q, "{r:?}");
        assert!(r.actions >= 1 && r.actions <= 2, "{r:?}");
        assert!(r.last_signal_ns >= r.first_signal_ns, "{r:?}");
        // On the agent's own estimate of the master clock, never before the deadline;
        // on the true one, within the error bound.
        assert!(r.first_signal_ns >= r.deadline_ns, "switched early: {r:?}");
        assert!(r.clock_error_ns > 0 && r.clock_error_ns < 50 * MS, "{r:?}");
        latencies.push(r.last_signal_ns - r.deadline_ns);
    }
    latencies.sort_unstable();
    let median = latencies[latencies.len() / 2];
    assert!(median < 5 * MS, "median switch latency {median} ns");
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_mode_renices_and_an_unnamed_job_is_restored() {
    let mut s = Setup::start(3, 1, 0, ClockMode::Host).await;
    let q = 50 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Priority, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Priority, "sleep 30").await;
    let base = proc_nice(p1).unwrap();
    let niced = (base + 15).min(19);
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let samples = s
        .sample(&[p1, p2], epoch + MARGIN, epoch + 600 * MS, proc_nice)
        .await;
    let (judged, bad) = judge(&samples, &[1, 2], epoch, q, &rows, |v| *v == Some(base));
    assert!(judged >= 50, "only {judged} samples judged");
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(samples.iter().any(|x| x.values[0] == Some(niced)));
    // Processes keep state R/S: priority mode never stops them.
    assert_ne!(proc_state(p1), Some('T'));

    // A table that no longer names them: both back to their base nice, and left alone.
    let at = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(2, epoch, q, at, &[0]))
        .await
        .unwrap();
    s.sleep_until(at + MARGIN).await;
    wait_until("both at base nice", || {
        proc_nice(p1) == Some(base) && proc_nice(p2) == Some(base)
    })
    .await;
    let later = s
        .sample(&[p1, p2], at + MARGIN, at + 200 * MS, proc_nice)
        .await;
    assert!(
        later
            .iter()
            .all(|x| x.values == vec![Some(base), Some(base)]),
        "reniced after the table stopped naming the jobs"
    );
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_mode_freezes_in_a_cgroup_removed_at_exit() {
    let mut s = Setup::start(3, 2, 0, ClockMode::Host).await;
    let Some(base) = s.agent.node.switch.freezer().map(|f| f.dir.clone()) else {
        eprintln!("skipped: no writable cgroup freezer on this machine (the agent logged why)");
        s.agent.shutdown().await;
        return;
    };
    let q = 50 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Freeze, BUSY).await;
    let p2 = s.launch(2, GangMode::Freeze, BUSY).await;
    let dir1 = base.join("job-1-rank-0");
    assert!(dir1.is_dir(), "{} missing", dir1.display());
    if let Some(cg) = cgroup_of(p1) {
        assert!(cg.ends_with("/job-1-rank-0"), "rank 1 is in {cg}");
    }
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let samples = s
        .sample(&[p1, p2], epoch + MARGIN, epoch + 800 * MS, state_and_cpu)
        .await;
    // A busy loop is R whenever it may run; frozen it is not (D on cgroup v1).
    let (judged, bad) = judge_states(
        &samples,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st == 'R',
        |st| st != 'R' && st != 'T',
    );
    assert!(judged >= 60, "only {judged} samples judged");
    assert!(bad.is_empty(), "{:#?}", &bad[..bad.len().min(10)]);
    for i in 0..2 {
        assert!(
            samples
                .iter()
                .any(|x| x.values[i].0.is_some_and(|c| c != 'R')),
            "job {} never seen frozen",
            i + 1
        );
    }
    // Frozen, not stopped: no SIGSTOP was sent.
    assert!(
        samples
            .iter()
            .all(|x| x.values.iter().all(|v| v.0 != Some('T')))
    );

    // Cancel: the frozen job is thawed so the TERM ends it; its cgroup goes with it.
    assert!(s.signal(1, 20_000).await);
    assert_eq!(s.registry.exit_of(1, 0).await.1, How::Signal(15));
    wait_until("the cgroup of an ended rank to be removed", || {
        !dir1.exists()
    })
    .await;
    // Shutdown with job 2 possibly frozen: still killed and reaped.
    s.agent.shutdown().await;
    assert_eq!(proc_state(p2), None);
    assert_eq!(s.registry.exit_of(2, 0).await.1, How::Signal(9));
    assert!(
        !base.exists(),
        "the agent's freezer directory is left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_switched_out_job() {
    let mut s = Setup::start(3, 3, 0, ClockMode::Host).await;
    // Long slots: slot 0 runs job 2; jobs 1 (STOP) and 3 (FREEZE) are out for 5 s.
    let q = 5_000 * MS;
    let rows = [2, 1, 3];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let p3 = s.launch(3, GangMode::Freeze, "sleep 30").await;
    let epoch = grid_after(s.now(), 50 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let freezer = cgroup_of(p3)
        .filter(|c| c.contains("job-3-rank-0"))
        .map(|c| format!("/sys/fs/cgroup/freezer{c}/freezer.state"));
    wait_until("job 1 stopped and job 3 frozen", || {
        proc_state(p1) == Some('T')
            && match &freezer {
                Some(f) => std::fs::read_to_string(f).is_ok_and(|st| st.trim() == "FROZEN"),
                None => proc_state(p3) == Some('T'),
            }
    })
    .await;
    if freezer.is_none() {
        eprintln!("note: no freezer here; job 3 was switched with SIGSTOP");
    }
    let t0 = Instant::now();
    assert!(s.signal(1, 20_000).await);
    assert!(s.signal(3, 20_000).await);
    assert_eq!(s.registry.exit_of(1, 0).await.1, How::Signal(15));
    assert_eq!(s.registry.exit_of(3, 0).await.1, How::Signal(15));
    // By the TERM, long before their rows came back (or the grace ran out).
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(
        s.now() < epoch + q,
        "the slot was over before the cancel took"
    );
    // Job 2 was never disturbed.
    assert_eq!(proc_state(p2), Some('S'));
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_table_applies_at_the_next_boundary() {
    let mut s = Setup::start(4, 0, 0, ClockMode::Host).await;
    let q = 400 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let epoch = (s.now().div_euclid(q) - 10) * q;
    // Send it 80-200 ms into a slot, with that slot's start as its effective time.
    loop {
        let into = (s.now() - epoch).rem_euclid(q);
        if (80 * MS..200 * MS).contains(&into) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let k = (s.now() - epoch).div_euclid(q);
    let effective = epoch + k * q;
    s.set_table(node_table(1, epoch, q, effective, &rows))
        .await
        .unwrap();
    let boundary = effective + q;
    // Nothing is switched mid-slot...
    let before = s
        .sample(&[p1, p2], s.now(), boundary - 20 * MS, proc_state)
        .await;
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|x| !x.values.contains(&Some('T'))),
        "switched before the next boundary"
    );
    // ...then it runs in step from the boundary on.
    let after = s
        .sample(
            &[p1, p2],
            boundary + MARGIN,
            boundary + q + 200 * MS,
            state_and_cpu,
        )
        .await;
    let (judged, bad) = judge_states(
        &after,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st != 'T',
        |st| st == 'T',
    );
    assert!(judged >= 100, "only {judged}");
    assert!(bad.is_empty(), "{bad:#?}");
    let recs = s.wait_records("the first switch", 1, 1).await;
    assert_eq!(recs[0].deadline_ns, boundary);
    assert_eq!(recs[0].slot, k + 1);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_table_version_wins_and_heartbeats_report_it() {
    let mut s = Setup::start(4, 1, 0, ClockMode::Host).await;
    let far = s.now() + 3_600_000 * MS;
    let t = |v| node_table(v, far, 10 * MS, far, &[0]);
    assert_eq!(s.set_table(t(5)).await.unwrap(), 5);
    assert_eq!(
        s.set_table(t(3)).await.unwrap(),
        5,
        "an older table is ignored"
    );
    assert_eq!(s.set_table(t(5)).await.unwrap(), 5, "idempotent");
    assert_eq!(s.set_table(t(6)).await.unwrap(), 6);
    let mut bad = t(7);
    bad.quantum_ns = MS / 2;
    let err = s.set_table(bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("node (4,1): "),
        "{}",
        err.message()
    );
    assert!(err.message().contains("quantum"), "{}", err.message());
    let hb = s
        .registry
        .wait_for("a heartbeat with table 6", |events| {
            events.iter().find_map(|e| match e {
                Event::Heartbeat(h) if h.table_version == 6 => Some(h.clone()),
                _ => None,
            })
        })
        .await;
    assert!(hb.clock_from_host);
    assert_eq!((hb.clock_offset_ns, hb.clock_error_ns), (0, 0));
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probed_clock_offset_is_reported() {
    let ahead = -1_500 * MS;
    let s = Setup::start(4, 3, ahead, ClockMode::Probe).await;
    let hb = s
        .registry
        .wait_for("a heartbeat with the offset", |events| {
            events.iter().find_map(|e| match e {
                Event::Heartbeat(h) if h.clock_offset_ns != 0 => Some(h.clone()),
                _ => None,
            })
        })
        .await;
    assert!(!hb.clock_from_host);
    assert!(
        hb.clock_error_ns > 0 && hb.clock_error_ns < 50 * MS,
        "{hb:?}"
    );
    assert!(
        (hb.clock_offset_ns - ahead).abs() <= hb.clock_error_ns,
        "offset {} ± {} vs {ahead}",
        hb.clock_offset_ns,
        hb.clock_error_ns
    );
    // The burst at start: 8 probes 20 ms apart, well before the first 1 s period.
    let t0 = Instant::now();
    wait_until("the burst of probes", || s.registry.probes() >= 8).await;
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_goes_on_while_the_master_is_gone() {
    let mut s = Setup::start(4, 2, 0, ClockMode::Host).await;
    let q = 30 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    s.wait_records("a first report", 1, 1).await;
    let addr = s.registry.addr;
    let Setup {
        registry,
        agent,
        client,
        ahead,
    } = s;
    let pki = registry.stop().await;
    let gone_at = realtime_ns();

    let before = agent.node.switch.switches();
    let sw = std::sync::Arc::clone(&agent.node.switch);
    wait_until("20 switches with the master gone", || {
        sw.switches() >= before + 20
    })
    .await;
    let s = Setup {
        registry: TestRegistry::start_on(addr, pki, MasterOptions::default()).await,
        agent,
        client,
        ahead,
    };
    let from = s.now() + MARGIN;
    let samples = s
        .sample(&[p1, p2], from, from + 300 * MS, state_and_cpu)
        .await;
    let (judged, bad) = judge_states(
        &samples,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st != 'T',
        |st| st == 'T',
    );
    assert!(judged >= 30 && bad.is_empty(), "{judged} judged: {bad:#?}");
    // The records made while it was gone were kept and arrive now.
    s.registry
        .wait_for("records from the outage", |events| {
            events
                .iter()
                .any(|e| matches!(e, Event::Switches(r) if r.records.iter().any(|x| x.deadline_ns > gone_at && x.deadline_ns < gone_at + 200 * MS)))
                .then_some(())
        })
        .await;
    assert!(s.records().iter().all(|r| r.table_version == 1));
    s.agent.shutdown().await;
}
