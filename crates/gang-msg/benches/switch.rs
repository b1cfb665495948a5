//! `cargo bench -p gang-msg --bench switch`: prints one JSON object.
//!
//! - `switch_cost`: 4 ranks (2x2) under the fake agent, a boundary every
//!   ~15 ms, each rank SIGSTOPped at it for 3 ms. Just before each quiesce
//!   every rank posts VOLUME bytes (64 KiB messages) to its ring neighbour, so
//!   that much is in flight when the flush starts. Per context mode and
//!   volume: flush, save and restore times (median, p99) over every rank and
//!   switch that quiesced in time.
//! - `inflight_at_boundary`: ranks stream 64 KiB messages around the ring;
//!   bytes written by some rank's transport and not yet read by its peer when
//!   every rank is stopped at the boundary, with the library's flush on and off.
//! - `pingpong`: one-way latency of 8-byte messages, blocking receive vs
//!   spin-then-block (50 us).
//!
//! Env: `SWITCHES` (default 120). The bench re-executes itself as the ranks
//! (`GANG_RANK` set).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{Job, JobSpec, percentiles};

const CHUNK: usize = 64 << 10;
const LEAD_US: u64 = 5000;

fn rank_main() {
    let comm = gang_msg::init().expect("init");
    let mode = std::env::var("BENCH_MODE").unwrap();
    let stop = std::path::PathBuf::from(std::env::var("BENCH_STOP").unwrap());
    let (r, n) = (comm.rank(), comm.size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    match mode.as_str() {
        "burst" => {
            let volume: usize = std::env::var("BENCH_VOLUME").unwrap().parse().unwrap();
            let chunks = volume.div_ceil(CHUNK);
            let lead = LEAD_US * 1000;
            let mut last = 0;
            while !stop.exists() {
                let b = comm.switch_out_at_ns().unwrap_or(0);
                let now = comm.master_now_ns();
                if b == last || b < now + lead + 300_000 {
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                }
                last = b;
                // Post the burst 100 us before this rank's quiesce begins.
                let at = b - lead - 100_000;
                while comm.master_now_ns() < at {
                    if at - comm.master_now_ns() > 300_000 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                let data = vec![r as u8; CHUNK];
                let sends: Vec<_> = (0..chunks)
                    .map(|_| comm.isend(right, 1, &data).unwrap())
                    .collect();
                for _ in 0..chunks {
                    comm.recv(Some(left), Some(1)).unwrap();
                }
                sends.iter().for_each(|s| s.wait().unwrap());
            }
        }
        "stream" => {
            let data = vec![r as u8; CHUNK];
            for i in 0u64.. {
                // Stop together: a rank that stopped alone would leave its
                // left neighbour waiting for a message.
                if i.is_multiple_of(16) {
                    let mut f = [stop.exists() as i64];
                    comm.allreduce_i64(&mut f, gang_msg::Op::Max).unwrap();
                    if f[0] == 1 {
                        break;
                    }
                }
                let s = comm.isend(right, 1, &data).unwrap();
                comm.recv(Some(left), Some(1)).unwrap();
                s.wait().unwrap();
            }
        }
        "pingpong" => {
            let spin: u64 = std::env::var("BENCH_SPIN").unwrap().parse().unwrap();
            comm.set_spin_us(spin);
            let iters = 20_000;
            let mut rtt = Vec::with_capacity(iters);
            for i in 0..iters + 2000 {
                let t = Instant::now();
                if r == 0 {
                    comm.send(1, 0, &[0u8; 8]).unwrap();
                    comm.recv(Some(1), Some(0)).unwrap();
                } else {
                    comm.recv(Some(0), Some(0)).unwrap();
                    comm.send(0, 0, &[0u8; 8]).unwrap();
                }
                if i >= 2000 {
                    rtt.push(t.elapsed().as_nanos() as u64 / 2);
                }
            }
            if r == 0 {
                let (m, p) = percentiles(&rtt);
                println!(
                    "{{\"median_us\":{:.2},\"p99_us\":{:.2}}}",
                    m as f64 / 1000.0,
                    p as f64 / 1000.0
                );
            }
        }
        m => panic!("unknown BENCH_MODE {m}"),
    }
    comm.finalize().expect("finalize");
}

fn stop_file() -> (tempfile::TempPath, String) {
    let p = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::remove_file(&p).unwrap();
    let s = p.to_string_lossy().into_owned();
    (p, s)
}

fn spec(mode: &str, stop: &str) -> JobSpec {
    let mut s = JobSpec::new(std::env::current_exe().unwrap(), 2, 2)
        .env("BENCH_MODE", mode)
        .env("BENCH_STOP", stop)
        .env("GANG_MSG_LEAD_US", LEAD_US.to_string())
        .env("GANG_MSG_GRACE_US", "3000");
    s.quiet = true;
    s
}

fn stats(v: &[u64]) -> serde_json::Value {
    let (m, p) = percentiles(v);
    serde_json::json!({ "median_us": m as f64 / 1000.0, "p99_us": p as f64 / 1000.0, "n": v.len() })
}

fn switch_cost(context: &str, volume: usize, switches: usize) -> serde_json::Value {
    let (stop, stop_s) = stop_file();
    let mut job = Job::start(
        spec("burst", &stop_s)
            .env("GANG_MSG_CONTEXT", context)
            .env("BENCH_VOLUME", volume.to_string()),
    );
    job.wait_states(Duration::from_secs(30), "ranks initialised", |s| {
        s.iter().all(|s| s.ready)
    });
    let ahead = Duration::from_micros(LEAD_US + 3000);
    job.drive_switches(
        switches,
        ahead,
        Duration::from_millis(3),
        Duration::from_millis(4),
    );
    // One more round so the last boundary's restore is on the pages.
    std::thread::sleep(Duration::from_millis(20));
    let last = job.snapshots();
    std::fs::write(&stop, b"").unwrap();
    job.expect_success(Duration::from_secs(60));
    let recs = &job.switches;
    let (mut flush, mut save, mut restore, mut total, mut inflight) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut unflushed = 0;
    for (k, rec) in recs.iter().enumerate().skip(2) {
        for (r, s) in rec.states.iter().enumerate() {
            if s.quiesced_for_ns != rec.boundary
                || s.timings_for_ns != rec.boundary
                || rec.stop_too_late()
            {
                unflushed += 1;
                continue;
            }
            // The restore after boundary k is on the pages read at boundary k+1.
            let after = recs.get(k + 1).map_or(&last[r], |n| &n.states[r]);
            flush.push(s.flush_ns);
            save.push(s.save_ns);
            restore.push(after.restore_ns);
            total.push(s.flush_ns + s.save_ns + after.restore_ns);
            inflight.push(s.inflight_bytes_at_quiesce);
        }
    }
    serde_json::json!({
        "context": context, "volume_per_rank": volume, "switches": recs.len() - 2, "rank_switches_unflushed": unflushed,
        "inflight_bytes_at_quiesce_median": percentiles(&inflight).0,
        "flush": stats(&flush), "save": stats(&save), "restore": stats(&restore), "total": stats(&total),
    })
}

fn inflight(flush: &str, switches: usize) -> serde_json::Value {
    let (stop, stop_s) = stop_file();
    let mut job = Job::start(spec("stream", &stop_s).env("GANG_MSG_FLUSH", flush));
    job.wait_states(Duration::from_secs(30), "ranks streaming", |s| {
        s.iter().all(|s| s.ready && s.posted_sends > 10)
    });
    job.drive_switches(
        switches,
        Duration::from_micros(LEAD_US + 3000),
        Duration::from_millis(3),
        Duration::from_millis(4),
    );
    std::fs::write(&stop, b"").unwrap();
    job.expect_success(Duration::from_secs(60));
    let wire: Vec<u64> = job.switches.iter().map(|r| r.wire_bytes()).collect();
    let unacked: Vec<u64> = job.switches.iter().map(|r| r.unacked_bytes()).collect();
    let quiesced = job.switches.iter().filter(|r| r.all_quiesced()).count();
    let (wm, wp) = percentiles(&wire);
    serde_json::json!({
        "flush": flush, "switches": wire.len(), "all_ranks_quiesced": quiesced,
        "wire_bytes_median": wm, "wire_bytes_p99": wp, "wire_bytes_max": wire.iter().max(),
        "unacked_bytes_median": percentiles(&unacked).0, "unacked_bytes_max": unacked.iter().max(),
    })
}

fn pingpong(spin: u64) -> serde_json::Value {
    let (_stop, stop_s) = stop_file();
    // Rank 0 prints its figures into a file of its own: the bench's stdout carries only its JSON.
    let log = tempfile::NamedTempFile::new().unwrap();
    let s = JobSpec::new(std::env::current_exe().unwrap(), 2, 1)
        .env("BENCH_MODE", "pingpong")
        .env("BENCH_STOP", &stop_s)
        .env("BENCH_SPIN", spin.to_string())
        .env("BENCH_OUT", log.path().to_string_lossy());
    let mut job = Job::start(s);
    job.expect_success(Duration::from_secs(120));
    let line = std::fs::read_to_string(log.path()).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or(serde_json::Value::Null);
    v["spin_us"] = spin.into();
    v
}

fn main() {
    if std::env::var_os("GANG_RANK").is_some() {
        if let Some(out) = std::env::var_os("BENCH_OUT") {
            use std::os::fd::AsRawFd;
            let f = std::fs::OpenOptions::new().append(true).open(out).unwrap();
            unsafe { libc::dup2(f.as_raw_fd(), 1) };
        }
        rank_main();
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes harness=false benches with --list
    }
    let switches: usize = std::env::var("SWITCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut cost = Vec::new();
    for context in ["resident", "save-restore"] {
        for volume in [0, 64 << 10, 1 << 20] {
            cost.push(switch_cost(context, volume, switches));
        }
    }
    let inflight = vec![inflight("on", switches), inflight("off", switches)];
    let pp = vec![pingpong(0), pingpong(50)];
    let out = serde_json::json!({
        "bench": "gang-msg switch", "ranks": 4, "lead_us": LEAD_US, "stopped_ms": 3,
        "switch_cost": cost, "inflight_at_boundary": inflight, "pingpong_one_way": pp,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
