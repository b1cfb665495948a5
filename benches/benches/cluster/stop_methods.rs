//! (e) Stopping by signals versus the cgroup freezer, on one node through the agent's
//! switch library (no gRPC): 8 CPU-bound processes in two jobs of 4 process groups each,
//! two rows, a 10 ms quantum. For each method and switch:
//! - issue cost: last action returned - first action issued (the switch thread's work);
//! - stopped after: from the first action until every outgoing process is seen stopped
//!   (SIGSTOP: state T) or frozen (freezer: not runnable, D on cgroup v1) in
//!   /proc/PID/stat, by an observer thread (SCHED_FIFO 40, below the switch thread's 50)
//!   that polls the 8 processes from 300 us before to 3 ms after each deadline, sleeping
//!   `POLL_GAP` between polls (spinning would take a CPU from the 8 processes); its
//!   resolution is one poll gap plus a wake-up. A process waiting for a CPU acts on
//!   SIGSTOP (or enters the freezer) only once it is scheduled, and until then /proc shows
//!   it R although it does not run: so also
//! - outgoing CPU: the CPU time (/proc/PID/schedstat) the outgoing processes still got
//!   from 3 ms after the deadline to the end of their slot out: what "stopped" means for
//!   the incoming job (0 = the outgoing job never ran out of turn);
//! - running after: from the first action until every incoming process is runnable (R).
//!
//! `GANG_BENCH_SWITCHES` (default 1000) switches per method; `GANG_BENCH_QUANTUM_MS`
//! (default 10). Prints JSON. Every process is killed at the end, and on a panic.

use gang_benches::env_or;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gang_agent::Coord;
use gang_agent::ranks::RankKey;
use gang_agent::rt::clock::{Clock, ClockMode, realtime_ns};
use gang_agent::switch::freezer::FreezerSetting;
use gang_agent::switch::ring::Record;
use gang_agent::switch::{SwitchOptions, Switcher};
use gang_core::GangMode;
use gang_proto::v1::NodeTable;
use serde_json::json;

const BUSY: &str = "while :; do :; done";
const RANKS: u32 = 4;
/// The observer starts polling this long before each deadline.
const LOOK_AHEAD_NS: i64 = 300_000;
/// Between two polls.
const POLL_GAP_NS: i64 = 20_000;
/// Dense polling lasts until this long after each deadline.
const WINDOW_NS: i64 = 3_000_000;

/// One rank process of the benchmark.
struct Proc {
    key: RankKey,
    child: Child,
}

/// The processes of one run: taken out of the switcher, thawed, SIGKILLed and reaped when
/// dropped (also on a panic).
struct Procs {
    switcher: Arc<Switcher>,
    procs: Vec<Proc>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        let mut cleanups = Vec::new();
        for p in &mut self.procs {
            cleanups.push(self.switcher.rank_ended(p.key));
            // SAFETY: kill(2) on our child's process group.
            unsafe { libc::kill(-(p.child.id() as i32), libc::SIGKILL) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (p, cleanup) in self.procs.iter_mut().zip(&cleanups) {
            loop {
                // Thaws (a frozen process cannot die) and kills what is in the cgroup.
                let removed = cleanup.as_ref().is_none_or(|c| c.try_remove().is_ok());
                let exited = !matches!(p.child.try_wait(), Ok(None));
                if (exited && removed) || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

fn spawn_jobs(switcher: &Arc<Switcher>, jobs: [u64; 2], mode: GangMode) -> Procs {
    let mut procs = Procs {
        switcher: Arc::clone(switcher),
        procs: Vec::new(),
    };
    for job_id in jobs {
        for rank in 0..RANKS {
            let key = RankKey { job_id, rank };
            let prepared = switcher.prepare(key, mode, key.job_id);
            let mut cmd = Command::new("sh");
            cmd.args(["-c", BUSY])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if let Some(fd) = prepared.cgroup.as_ref().and_then(|c| c.procs_fd()) {
                // SAFETY: only write(2) in the child (see freezer::enter).
                unsafe {
                    cmd.pre_exec(move || gang_agent::switch::freezer::enter(fd));
                }
            }
            let child = cmd.spawn().expect("spawn a busy loop");
            let pid = child.id() as i32;
            procs.procs.push(Proc { key, child });
            switcher.add(prepared, pid);
        }
    }
    procs
}

fn pids_of(procs: &Procs, job: u64) -> Vec<u32> {
    procs
        .procs
        .iter()
        .filter(|p| p.key.job_id == job)
        .map(|p| p.child.id())
        .collect()
}

fn table(version: u64, epoch: i64, q: i64, rows: [u64; 2]) -> NodeTable {
    NodeTable {
        version,
        epoch_ns: epoch,
        quantum_ns: q,
        effective_ns: epoch,
        rows: rows.to_vec(),
        parked: vec![],
    }
}

/// /proc/PID/stat and /proc/PID/schedstat kept open; each read regenerates them.
struct Stat {
    stat: File,
    schedstat: File,
    buf: [u8; 512],
}

impl Stat {
    fn open(pid: u32) -> Stat {
        Stat {
            stat: File::open(format!("/proc/{pid}/stat")).expect("open stat"),
            schedstat: File::open(format!("/proc/{pid}/schedstat")).expect("open schedstat"),
            buf: [0; 512],
        }
    }

    /// The state letter (R, S, T, D, ...).
    fn state(&mut self) -> u8 {
        let n = self.stat.read_at(&mut self.buf, 0).unwrap_or(0);
        let text = &self.buf[..n];
        match text.iter().rposition(|&b| b == b')') {
            Some(i) if i + 2 < n => text[i + 2],
            _ => b'?',
        }
    }

    /// Time spent on a CPU, ns (exact for a process not running at the moment: the sum
    /// is brought up to date when it leaves the CPU).
    fn run_ns(&mut self) -> i64 {
        let n = self.schedstat.read_at(&mut self.buf, 0).unwrap_or(0);
        std::str::from_utf8(&self.buf[..n])
            .ok()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

fn sleep_until_realtime(ns: i64) {
    let ts = libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    };
    // SAFETY: valid pointers; EINTR just ends the sleep early.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_REALTIME,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn pause(ns: i64) {
    let gap = libc::timespec {
        tv_sec: 0,
        tv_nsec: ns,
    };
    // SAFETY: valid pointers.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &gap, std::ptr::null_mut()) };
}

/// What the observer saw around one boundary.
struct Seen {
    deadline: i64,
    /// When every outgoing process was first seen not runnable (T, or D when frozen),
    /// within `WINDOW_NS` of the deadline.
    out_stopped: Option<i64>,
    /// When each outgoing process was first seen not runnable, within `WINDOW_NS`.
    each_stopped: Vec<Option<i64>>,
    /// When every incoming process was first seen runnable (R) again.
    in_running: Option<i64>,
    /// Outgoing processes still in state R `WINDOW_NS` after the deadline.
    out_runnable_after_window: usize,
    /// CPU time the outgoing processes got from `WINDOW_NS` after the deadline to the end
    /// of their slot out.
    out_cpu_after_window_ns: i64,
}

/// Watch `n` boundaries from `epoch` on: rows alternate between `jobs[0]` and `jobs[1]`.
fn observe(jobs: [Vec<u32>; 2], epoch: i64, q: i64, n: usize) -> (Vec<Seen>, bool) {
    let param = libc::sched_param { sched_priority: 40 };
    // SAFETY: this thread, a valid parameter.
    let rt = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
    let mut stats: [Vec<Stat>; 2] = [
        jobs[0].iter().map(|&p| Stat::open(p)).collect(),
        jobs[1].iter().map(|&p| Stat::open(p)).collect(),
    ];
    let mut seen = Vec::with_capacity(n);
    // Skip the first boundary (everything ran before it, both jobs were "incoming").
    for k in 1..=n as i64 {
        let deadline = epoch + k * q;
        let (incoming, outgoing) = if k % 2 == 0 { (0, 1) } else { (1, 0) };
        sleep_until_realtime(deadline - LOOK_AHEAD_NS);
        let mut s = Seen {
            deadline,
            out_stopped: None,
            each_stopped: vec![None; stats[outgoing].len()],
            in_running: None,
            out_runnable_after_window: 0,
            out_cpu_after_window_ns: 0,
        };
        // Dense polling around the switch.
        loop {
            let now = realtime_ns();
            for (st, seen) in stats[outgoing].iter_mut().zip(&mut s.each_stopped) {
                if seen.is_none() && st.state() != b'R' {
                    *seen = Some(realtime_ns());
                }
            }
            if s.out_stopped.is_none() && s.each_stopped.iter().all(Option::is_some) {
                s.out_stopped = s.each_stopped.iter().flatten().max().copied();
            }
            if s.in_running.is_none()
                && now >= deadline
                && stats[incoming].iter_mut().all(|st| st.state() == b'R')
            {
                s.in_running = Some(realtime_ns());
            }
            if now > deadline + WINDOW_NS {
                break;
            }
            pause(POLL_GAP_NS);
        }
        s.out_runnable_after_window = stats[outgoing]
            .iter_mut()
            .map(|st| st.state())
            .filter(|&c| c == b'R')
            .count();
        let before: i64 = stats[outgoing].iter_mut().map(Stat::run_ns).sum();
        // Then what the outgoing job still got until its slot out ends.
        sleep_until_realtime(deadline + q - LOOK_AHEAD_NS - 100_000);
        let after: i64 = stats[outgoing].iter_mut().map(Stat::run_ns).sum();
        s.out_cpu_after_window_ns = after - before;
        seen.push(s);
    }
    (seen, rt)
}

fn quantiles_us(mut v: Vec<i64>) -> serde_json::Value {
    let Some(s) = gang_core::quantile::summarize(&mut v) else {
        return json!(null);
    };
    let us = |ns: i64| (ns as f64 / 1000.0 * 10.0).round() / 10.0;
    json!({
        "p50_us": us(s.p50),
        "p99_us": us(s.p99),
        "max_us": us(s.max),
    })
}

/// Run one method: spawn, table, observe, collect the switch records.
fn run(
    switcher: &Arc<Switcher>,
    name: &str,
    mode: GangMode,
    version: u64,
    jobs: [u64; 2],
    q: i64,
    n: usize,
) -> serde_json::Value {
    let procs = spawn_jobs(switcher, jobs, mode);
    let epoch = (realtime_ns() / q + 20) * q;
    switcher
        .set_table(table(version, epoch, q, jobs))
        .expect("table");
    let watched = [pids_of(&procs, jobs[0]), pids_of(&procs, jobs[1])];
    let observer = std::thread::spawn(move || observe(watched, epoch, q, n));
    let (seen, observer_rt) = observer.join().expect("observer");
    let mut records: HashMap<i64, Record> = HashMap::new();
    let mut buf = Vec::new();
    let mut dropped = 0;
    // The records of the observed boundaries (all made by now, give or take one).
    let until = Instant::now() + Duration::from_secs(2);
    while seen.iter().any(|s| !records.contains_key(&s.deadline)) && Instant::now() < until {
        buf.clear();
        dropped += switcher.drain_records(&mut buf);
        for r in buf.drain(..).filter(|r| r.table_version == version) {
            records.insert(r.deadline_ns, r);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(procs);

    let mut cost = Vec::new();
    let mut stopped = Vec::new();
    let mut running = Vec::new();
    let mut stopped_after_deadline = Vec::new();
    let mut missed = 0;
    let mut leak = Vec::new();
    let mut runnable = 0usize;
    let mut all_stopped_in_window = 0usize;
    let mut each = Vec::new();
    let mut each_total = 0usize;
    for s in &seen {
        let Some(r) = records.get(&s.deadline) else {
            missed += 1;
            continue;
        };
        cost.push(r.last_ns - r.first_ns);
        leak.push(s.out_cpu_after_window_ns);
        runnable += s.out_runnable_after_window;
        each_total += s.each_stopped.len();
        each.extend(s.each_stopped.iter().flatten().map(|t| t - r.first_ns));
        if let Some(t) = s.out_stopped {
            all_stopped_in_window += 1;
            stopped.push(t - r.first_ns);
            stopped_after_deadline.push(t - s.deadline);
        }
        if let Some(t) = s.in_running {
            running.push(t - r.first_ns);
        }
    }
    let judged = seen.len() - missed;
    json!({
        "method": name,
        "switches": seen.len(),
        "issue_cost": quantiles_us(cost),
        "outgoing_processes_seen_stopped_within_3ms_fraction": each.len() as f64 / each_total.max(1) as f64,
        "each_outgoing_seen_stopped_after_first_action": quantiles_us(each),
        "switches_all_outgoing_seen_stopped_within_3ms": all_stopped_in_window,
        "all_outgoing_seen_stopped_after_first_action": quantiles_us(stopped),
        "all_outgoing_seen_stopped_after_deadline": quantiles_us(stopped_after_deadline),
        "outgoing_still_runnable_3ms_after_deadline_mean": runnable as f64 / judged.max(1) as f64,
        "outgoing_cpu_from_3ms_after_deadline_to_slot_end": quantiles_us(leak),
        "all_incoming_runnable_after_first_action": quantiles_us(running),
        "switches_without_record": missed,
        "poll_gap_us": POLL_GAP_NS / 1000,
        "records_dropped": dropped,
        "observer_sched_fifo": observer_rt,
    })
}

fn main() {
    let n = env_or("GANG_BENCH_SWITCHES", 1000) as usize;
    let q = env_or("GANG_BENCH_QUANTUM_MS", 10) as i64 * 1_000_000;
    let switcher = Switcher::start(
        Coord { x: 0, y: 0 },
        Clock::new(ClockMode::Host),
        &SwitchOptions {
            freezer: FreezerSetting::Auto,
            ..SwitchOptions::default()
        },
    )
    .expect("switch thread");
    let mut results = vec![run(&switcher, "signals", GangMode::Stop, 1, [1, 2], q, n)];
    let freezer = switcher
        .freezer()
        .map(|f| (f.dir.display().to_string(), format!("{:?}", f.kind)));
    match &freezer {
        Some(_) => results.push(run(&switcher, "freezer", GangMode::Freeze, 2, [3, 4], q, n)),
        None => results.push(json!({
            "method": "freezer",
            "skipped": "no writable cgroup freezer on this machine",
        })),
    }
    let (errors, errno) = switcher.errors();
    switcher.stop_blocking();
    if let Some(f) = switcher.freezer() {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(f.remove());
    }
    let out = json!({
        "bench": "stop_methods",
        "processes": 2 * RANKS,
        "process_groups_per_job": RANKS,
        "quantum_ms": q / 1_000_000,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "switch_thread_sched_fifo": switcher.realtime(),
        "freezer": freezer.map(|(dir, kind)| json!({"dir": dir, "kind": kind})),
        "results": results,
        "failed_actions": errors,
        "last_errno": errno,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
