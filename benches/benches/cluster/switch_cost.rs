//! (d) The cost of one gang switch on one node: the agent's switch library (no gRPC, no
//! master), 8 CPU-bound processes in two jobs of 4 process groups each, a slice table of
//! two rows with a 10 ms quantum. Per switch: cost = last action - first action, latency
//! = last action - deadline. STOP mode (SIGSTOP/SIGCONT) sleeping to the deadline, STOP
//! with the thread waking `GANG_BENCH_SPIN_US` (default 200) early and spinning to the
//! deadline, then PRIORITY mode (renice). Each run has fresh processes.
//!
//! `GANG_BENCH_SWITCHES` (default 2000) switches per run; `GANG_BENCH_QUANTUM_MS`
//! (default 10). Prints JSON. Every process is killed at the end, and on a panic.

use gang_benches::env_or;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

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

/// The benchmark's processes: continued and SIGKILLed when dropped (also on a panic).
struct Procs {
    switcher: Arc<Switcher>,
    children: Vec<Child>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.switcher.stop_blocking();
        for c in &mut self.children {
            // SAFETY: kill(2) on our child's process group.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

fn spawn_jobs(switcher: &Arc<Switcher>, mode: GangMode) -> Procs {
    let mut procs = Procs {
        switcher: Arc::clone(switcher),
        children: Vec::new(),
    };
    for job_id in [1, 2] {
        for rank in 0..RANKS {
            let key = RankKey { job_id, rank };
            let prepared = switcher.prepare(key, mode, key.job_id);
            let child = Command::new("sh")
                .args(["-c", BUSY])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a busy loop");
            let pid = child.id() as i32;
            procs.children.push(child);
            switcher.add(prepared, pid);
        }
    }
    procs
}

fn table(version: u64, epoch: i64, q: i64, effective: i64) -> NodeTable {
    NodeTable {
        version,
        epoch_ns: epoch,
        quantum_ns: q,
        effective_ns: effective,
        rows: vec![1, 2],
        parked: vec![],
    }
}

/// Collect `n` records of table `version` (the first switch, from "everything runs",
/// is left out).
fn collect(switcher: &Switcher, version: u64, n: usize) -> (Vec<Record>, u64) {
    let mut all = Vec::new();
    let mut dropped = 0;
    let mut buf = Vec::new();
    while all.len() < n + 1 {
        std::thread::sleep(Duration::from_millis(50));
        buf.clear();
        dropped += switcher.drain_records(&mut buf);
        all.extend(buf.iter().filter(|r| r.table_version == version));
    }
    all.remove(0);
    all.truncate(n);
    (all, dropped)
}

/// p50, p99, max, mean of nanosecond values, in microseconds.
fn quantiles_us(mut v: Vec<i64>) -> serde_json::Value {
    let s = gang_core::quantile::summarize(&mut v).expect("switches were recorded");
    let us = |ns: f64| (ns / 1000.0 * 10.0).round() / 10.0;
    json!({
        "p50_us": us(s.p50 as f64),
        "p99_us": us(s.p99 as f64),
        "max_us": us(s.max as f64),
        "mean_us": us(s.mean),
    })
}

fn summarize(mode: &str, recs: &[Record], dropped: u64) -> serde_json::Value {
    let cost: Vec<i64> = recs.iter().map(|r| r.last_ns - r.first_ns).collect();
    let latency: Vec<i64> = recs.iter().map(|r| r.last_ns - r.deadline_ns).collect();
    let start: Vec<i64> = recs.iter().map(|r| r.first_ns - r.deadline_ns).collect();
    let actions = recs.iter().map(|r| r.actions as f64).sum::<f64>() / recs.len() as f64;
    json!({
        "mode": mode,
        "switches": recs.len(),
        "actions_per_switch": actions,
        "cost": quantiles_us(cost),
        "latency": quantiles_us(latency),
        "wakeup": quantiles_us(start),
        "records_dropped": dropped,
    })
}

/// One run: a fresh switcher and 8 processes, `n` switches in `mode`.
fn run(mode: GangMode, name: &str, spin_us: u64, n: usize, q: i64) -> serde_json::Value {
    let switcher = Switcher::start(
        Coord { x: 0, y: 0 },
        Clock::new(ClockMode::Host),
        &SwitchOptions {
            freezer: FreezerSetting::Off,
            spin: Duration::from_micros(spin_us),
            ..SwitchOptions::default()
        },
    )
    .expect("switch thread");
    let procs = spawn_jobs(&switcher, mode);
    let epoch = (realtime_ns() / q + 10) * q;
    switcher
        .set_table(table(1, epoch, q, epoch))
        .expect("table");
    let (recs, dropped) = collect(&switcher, 1, n);
    let (errors, errno) = switcher.errors();
    drop(procs);
    let mut out = summarize(name, &recs, dropped);
    out["spin_us"] = json!(spin_us);
    out["switch_thread_sched_fifo"] = json!(switcher.realtime());
    out["failed_actions"] = json!(errors);
    out["last_errno"] = json!(errno);
    out
}

fn main() {
    let n = env_or("GANG_BENCH_SWITCHES", 2000) as usize;
    let q = env_or("GANG_BENCH_QUANTUM_MS", 10) as i64 * 1_000_000;
    let spin = env_or("GANG_BENCH_SPIN_US", 200);
    let results = vec![
        run(GangMode::Stop, "stop", 0, n, q),
        run(GangMode::Stop, "stop", spin, n, q),
        run(GangMode::Priority, "priority", 0, n, q),
    ];
    let out = json!({
        "bench": "switch_cost",
        "processes": 2 * RANKS,
        "process_groups_per_job": RANKS,
        "quantum_ms": q / 1_000_000,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "definitions": {
            "cost": "last action returned - first action issued, one switch",
            "latency": "last action returned - slot deadline (master clock = host clock here)",
            "wakeup": "first action issued - slot deadline",
            "spin_us": "the switch thread wakes this long before the deadline and spins to it",
        },
        "results": results,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
