//! HPC Challenge (Debian's `hpcc`, linked with Open MPI 4.1) under `prun --mpi pmix` on a
//! real 2x2 loopback cluster of two slices (MPL 2, a 50 ms quantum): alone, then beside a
//! second copy of itself, the two gang-switched. Prints the main figures of each run's
//! summary as JSON: HPL, PTRANS, MPI RandomAccess, STREAM, DGEMM, FFT, and the ping-pong
//! and ring latency and bandwidth, with each run's wall time and the switches reported.
//!
//! Input: the e2e test's (`crates/gang-e2e/tests/mpi/hpccinf.txt`, N=500, P=Q=2); env N
//! sets HPL's N (and with it every other size), QUANTUM_MS the quantum (default 50).
//! Both jobs run with `OMPI_MCA_mpi_yield_when_idle=1`: four ranks share this machine's
//! cores, and a rank polling without yielding holds its core until the scheduler's tick.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use gang_benches::{env_or, release_bins, two_slice_cluster};

const INPUT: &str = include_str!("../../../crates/gang-e2e/tests/mpi/hpccinf.txt");

/// The summary's figures this bench reports (names as hpcc prints them).
const FIGURES: [&str; 16] = [
    "HPL_Tflops",
    "HPL_time",
    "PTRANS_GBs",
    "MPIRandomAccess_GUPs",
    "MPIRandomAccess_LCG_GUPs",
    "StarRandomAccess_GUPs",
    "StarSTREAM_Triad",
    "SingleSTREAM_Triad",
    "StarDGEMM_Gflops",
    "MPIFFT_Gflops",
    "MinPingPongLatency_usec",
    "MaxPingPongLatency_usec",
    "MinPingPongBandwidth_GBytes",
    "MaxPingPongBandwidth_GBytes",
    "RandomlyOrderedRingLatency_usec",
    "RandomlyOrderedRingBandwidth_GBytes",
];

/// One hpcc run in `dir`: its figures and wall time.
fn run(prun: &Path, master: &str, dir: &Path) -> serde_json::Value {
    let _ = std::fs::remove_file(dir.join("hpccoutf.txt"));
    let t = Instant::now();
    let out = Command::new(prun)
        .args(["-n", "2x2", "--mpi", "pmix", "--", "/usr/bin/hpcc"])
        .current_dir(dir)
        .env("GANG_MASTER", master)
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .output()
        .expect("prun runs");
    let wall = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "hpcc failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(dir.join("hpccoutf.txt")).expect("hpccoutf.txt");
    assert!(
        report.contains("End of HPC Challenge tests."),
        "hpcc did not finish"
    );
    let summary: std::collections::HashMap<&str, &str> = report
        .split("Begin of Summary section.")
        .nth(1)
        .expect("a summary")
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let mut v = serde_json::Map::new();
    v.insert("wall_s".into(), wall.into());
    v.insert(
        "success".into(),
        (summary.get("Success") == Some(&"1")).into(),
    );
    for name in FIGURES {
        if let Some(x) = summary.get(name).and_then(|s| s.parse::<f64>().ok()) {
            v.insert(name.into(), x.into());
        }
    }
    // HPL in Gflops, the unit it is usually quoted in at this size.
    if let Some(tf) = v.get("HPL_Tflops").and_then(|x| x.as_f64()) {
        v.insert("HPL_Gflops".into(), (tf * 1e3).into());
    }
    serde_json::Value::Object(v)
}

fn switches(gangctl: &Path, master: &str) -> u64 {
    let out = Command::new(gangctl)
        .args(["--output", "json", "stats"])
        .env("GANG_MASTER", master)
        .output()
        .expect("gangctl runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    v["switches_reported"].as_u64().unwrap_or(0)
}

fn main() {
    assert!(
        Path::new("/usr/bin/hpcc").exists(),
        "/usr/bin/hpcc missing: sh scripts/setup-test-deps.sh installs it"
    );
    let n = env_or("N", 500);
    let quantum_ms = env_or("QUANTUM_MS", 50);
    let input = INPUT.replace("500          Ns", &format!("{n:<13}Ns"));
    let dirs: Vec<_> = (0..2)
        .map(|_| {
            let d = tempfile::Builder::new()
                .prefix("gang-hpcc-")
                .tempdir()
                .unwrap();
            std::fs::write(d.path().join("hpccinf.txt"), &input).unwrap();
            d
        })
        .collect();
    let bins = release_bins();
    let c = two_slice_cluster(&bins, quantum_ms);
    let prun = bins.join("prun");
    let gangctl = bins.join("gangctl");
    let m = c.master_addr().to_string();
    let solo = run(&prun, &m, dirs[0].path());
    let before = switches(&gangctl, &m);
    let t = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run(&prun, &m, dirs[0].path()));
        let b = s.spawn(|| run(&prun, &m, dirs[1].path()));
        (a.join().unwrap(), b.join().unwrap())
    });
    let shared_wall = t.elapsed().as_secs_f64();
    // Switch reports come with the agents' heartbeats: wait for the last ones.
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut after = switches(&gangctl, &m);
    while after == before && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        after = switches(&gangctl, &m);
    }
    let ratio = |k: &str| match (solo[k].as_f64(), a[k].as_f64()) {
        (Some(x), Some(y)) if x != 0.0 => serde_json::json!(y / x),
        _ => serde_json::Value::Null,
    };
    let ratios: serde_json::Map<_, _> = [
        "wall_s",
        "HPL_Gflops",
        "PTRANS_GBs",
        "MPIRandomAccess_GUPs",
        "StarSTREAM_Triad",
        "MinPingPongLatency_usec",
        "MaxPingPongBandwidth_GBytes",
        "RandomlyOrderedRingLatency_usec",
        "RandomlyOrderedRingBandwidth_GBytes",
    ]
    .into_iter()
    .map(|k| (k.to_string(), ratio(k)))
    .collect();
    let report = serde_json::json!({
        "bench": "hpcc",
        "mesh": "2x2",
        "hpl_n": n,
        "quantum_ms": quantum_ms,
        "solo": solo,
        "shared": {"a": a, "b": b, "wall_s": shared_wall, "switches": after - before},
        "shared_a_over_solo": ratios,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    c.shutdown().unwrap();
}
