//! The halo exchange example (`gang-msg`) on a real 2x2 loopback cluster, time to
//! solution: alone, and as one of two copies sharing the mesh in two slices (gang
//! switching at QUANTUM_MS, 40 ms by default as in SCore-D's figures), with the messaging
//! library's flush at each switch on (the library quiesces) and off (plain SIGSTOP/SIGCONT). Each
//! program checks its result against a serial recomputation.
//!
//! Goal (issue #10): shared, each copy finishes within 5% of twice its solo time.
//!
//! Prints JSON. Env: RUNS (default 5), ITERS (halo iterations, default 4000),
//! QUANTUM_MS (default 40).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use gang_benches::{env_or, median_p99, msg_example, release_bins, two_slice_cluster};

/// One prun of the halo example; its wall time in seconds.
fn run(prun: &Path, master: &str, halo: &Path, iters: u64, flush: bool) -> f64 {
    let t = Instant::now();
    let out = Command::new(prun)
        .args(["-n", "2x2", "--"])
        .arg(halo)
        .args(["--iters", &iters.to_string()])
        .env("GANG_MASTER", master)
        .env("GANG_MSG_FLUSH", if flush { "on" } else { "off" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "halo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64()
}

/// Two copies at once; the later finish, in seconds.
fn pair(prun: &Path, master: &str, halo: &Path, iters: u64, flush: bool) -> f64 {
    std::thread::scope(|s| {
        let a = s.spawn(|| run(prun, master, halo, iters, flush));
        let b = s.spawn(|| run(prun, master, halo, iters, flush));
        a.join().unwrap().max(b.join().unwrap())
    })
}

fn stats(xs: &mut [f64]) -> serde_json::Value {
    let (median, p99) = median_p99(xs);
    serde_json::json!({"median_s": median, "p99_s": p99, "min_s": xs[0], "runs": xs.len()})
}

fn main() {
    let runs = env_or("RUNS", 5);
    let iters = env_or("ITERS", 4000) as u64;
    let quantum_ms = env_or("QUANTUM_MS", 40);
    let bins = release_bins();
    let halo = msg_example(&bins, "halo");
    let c = two_slice_cluster(&bins, quantum_ms);
    let prun = bins.join("prun");
    let master = c.master_addr().to_string();
    let (mut solo, mut flushed, mut plain) = (vec![], vec![], vec![]);
    // Warm-up, then the three cases interleaved so noise hits them alike.
    run(&prun, &master, &halo, iters / 10, true);
    for _ in 0..runs {
        solo.push(run(&prun, &master, &halo, iters, true));
        flushed.push(pair(&prun, &master, &halo, iters, true));
        plain.push(pair(&prun, &master, &halo, iters, false));
    }
    c.shutdown().unwrap();
    let (solo_median, _) = median_p99(&mut solo.clone());
    let (flushed_median, _) = median_p99(&mut flushed.clone());
    let (plain_median, _) = median_p99(&mut plain.clone());
    let out = serde_json::json!({
        "bench": "msg_halo", "mesh": "2x2", "mpl": 2, "quantum_ms": quantum_ms,
        "iterations": iters,
        "solo": stats(&mut solo),
        "shared_with_flush": stats(&mut flushed),
        "shared_without_flush": stats(&mut plain),
        "shared_with_flush_over_twice_solo": flushed_median / (2.0 * solo_median),
        "shared_without_flush_over_twice_solo": plain_median / (2.0 * solo_median),
        "goal": "shared <= 1.05 x twice solo",
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
