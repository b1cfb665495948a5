//! Spin-then-block receive against plain blocking, in `priority` mode where it matters
//! most (AP/Linux moderate co-scheduling: the job out of its slot is reniced, not
//! stopped, so a rank blocked in the kernel waits behind the other job's ranks). A real
//! 2x2 loopback cluster, two slices; the ping-pong example (`gang-msg`) between ranks 0
//! and 1, alone and with a second copy sharing the mesh, each with GANG_MSG_SPIN_US 0
//! (block at once) and SPIN_US (spin, then block).
//!
//! Prints JSON. Env: RUNS (default 5), ITERS (round trips, default 20000), SPIN_US
//! (default 50), QUANTUM_MS (default 40).

use std::path::Path;
use std::process::Command;

use gang_benches::{env_or, median_p99, msg_example, release_bins, two_slice_cluster};

/// One prun of the example in priority mode; its one-way median latency (µs).
fn run(prun: &Path, master: &str, bin: &Path, iters: u64, spin_us: u64) -> f64 {
    let out = Command::new(prun)
        .args(["-n", "2x2", "--gang", "priority", "--"])
        .arg(bin)
        .args(["--iters", &iters.to_string()])
        .env("GANG_MASTER", master)
        .env("GANG_MSG_SPIN_US", spin_us.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pingpong failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the example prints its JSON line");
    v["one_way_median_us"].as_f64().unwrap()
}

fn stats(xs: &mut [f64]) -> serde_json::Value {
    let (median, p99) = median_p99(xs);
    serde_json::json!({"median_of_medians_us": median, "p99_us": p99, "runs": xs.len()})
}

fn main() {
    let runs = env_or("RUNS", 5);
    let iters = env_or("ITERS", 20_000) as u64;
    let spin = env_or("SPIN_US", 50) as u64;
    let quantum_ms = env_or("QUANTUM_MS", 40);
    let bins = release_bins();
    let bin = msg_example(&bins, "pingpong");
    let c = two_slice_cluster(&bins, quantum_ms);
    let prun = bins.join("prun");
    let m = c.master_addr().to_string();
    let mut cases: Vec<(String, Vec<f64>)> = Vec::new();
    run(&prun, &m, &bin, iters / 10, 0);
    for _ in 0..runs {
        for (k, spin_us) in [0, spin].into_iter().enumerate() {
            let solo = run(&prun, &m, &bin, iters, spin_us);
            // Shared: both copies with the same setting; the first copy's figure.
            let shared = std::thread::scope(|s| {
                let a = s.spawn(|| run(&prun, &m, &bin, iters, spin_us));
                let b = s.spawn(|| run(&prun, &m, &bin, iters, spin_us));
                let x = a.join().unwrap();
                b.join().unwrap();
                x
            });
            for (j, v) in [solo, shared].into_iter().enumerate() {
                let name = format!(
                    "{}_{}",
                    ["solo", "shared"][j],
                    if k == 0 {
                        "block".to_string()
                    } else {
                        format!("spin{spin_us}us")
                    }
                );
                match cases.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, xs)) => xs.push(v),
                    None => cases.push((name, vec![v])),
                }
            }
        }
    }
    c.shutdown().unwrap();
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), "msg_pingpong".into());
    out.insert("gang_mode".into(), "priority".into());
    out.insert("quantum_ms".into(), quantum_ms.into());
    out.insert("round_trips".into(), iters.into());
    for (name, mut xs) in cases {
        out.insert(name, stats(&mut xs));
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
