//! Ranks across emulated hosts (gang-local's `hosts`: each host its own network, mount
//! and PID namespaces, systemd as PID 1, the master and agents from `deploy/`'s units),
//! release binaries. Root only.
//!
//! (1) Ring round trip: the `ringtrip` example (`gang-msg`) on a 2x2 mesh, a token of
//!     8 bytes around the 4 ranks, RUNS jobs of ITERS laps each (after 200 warm-up laps):
//!     with one node on each of 4 hosts (every hop TCP across the hosts' bridge), and with
//!     all 4 nodes on one host (Unix sockets: the ranks share a machine-id). One job at a
//!     time, so nothing is switched.
//! (2) Launch: `prun -n 4x4 true` on a 4x4 mesh over 4 hosts (a row of 4 agents each),
//!     LAUNCHES times, from spawning prun to its exit.
//!
//! Prints JSON: median and p99 of every lap pooled, the median and p99 of the runs'
//! medians, and the launch's median and p99. Env: RUNS (default 20), ITERS (default
//! 2000), LAUNCHES (default 40).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, msg_example, release_bins};
use gang_local::hosts::{EmulatedHosts, HostsOptions, check_support};

fn boot(bins: &Path, mesh: (u32, u32), hosts: u32) -> EmulatedHosts {
    let opts = HostsOptions {
        hosts,
        bin_dir: Some(bins.to_path_buf()),
        boot_timeout: Duration::from_secs(180),
        ..HostsOptions::default()
    };
    EmulatedHosts::start(mesh, opts).expect("emulated hosts boot")
}

fn prun(bins: &Path, c: &EmulatedHosts, args: &[&str]) -> std::process::Output {
    let out = Command::new(bins.join("prun"))
        .args(args)
        .env("GANG_MASTER", c.master_addr())
        .output()
        .expect("prun runs");
    assert!(
        out.status.success(),
        "prun {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// RUNS ring jobs on `hosts` hosts: every lap's round trip (µs) and each run's median.
fn ring(bins: &Path, ex: &Path, hosts: u32, runs: usize, iters: usize) -> serde_json::Value {
    let c = boot(bins, (2, 2), hosts);
    let ex = ex.display().to_string();
    let iters_s = iters.to_string();
    let args = [
        "-n",
        "2x2",
        "--",
        &ex,
        "--iters",
        &iters_s,
        "--warmup",
        "200",
        "--samples",
        "1",
    ];
    let mut all = Vec::new();
    let mut medians = Vec::new();
    for _ in 0..runs {
        let out = prun(bins, &c, &args);
        let v: serde_json::Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .expect("ringtrip prints its JSON line");
        medians.push(v["rtt_median_us"].as_f64().unwrap());
        all.extend(
            v["samples_us"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap()),
        );
    }
    c.shutdown().unwrap();
    let laps = all.len();
    let (median, p99) = median_p99(&mut all);
    let (run_median, run_p99) = median_p99(&mut medians);
    serde_json::json!({
        "hosts": hosts,
        "transport": if hosts == 1 { "unix" } else { "tcp" },
        "rtt_median_us": median,
        "rtt_p99_us": p99,
        "run_medians_median_us": run_median,
        "run_medians_p99_us": run_p99,
        "runs": runs,
        "laps": laps,
    })
}

fn main() {
    if let Err(e) = check_support() {
        eprintln!("hosts_ranks: {e:#}");
        std::process::exit(2);
    }
    let runs = env_or("RUNS", 20);
    let iters = env_or("ITERS", 2000);
    let launches = env_or("LAUNCHES", 40);
    let bins = release_bins();
    let ex = msg_example(&bins, "ringtrip");

    let across = ring(&bins, &ex, 4, runs, iters);
    let within = ring(&bins, &ex, 1, runs, iters);

    let c = boot(&bins, (4, 4), 4);
    let args = ["-n", "4x4", "true"];
    for _ in 0..3 {
        prun(&bins, &c, &args);
    }
    let mut ms = Vec::new();
    for _ in 0..launches {
        let t = Instant::now();
        prun(&bins, &c, &args);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    c.shutdown().unwrap();
    let (median, p99) = median_p99(&mut ms);

    let out = serde_json::json!({
        "bench": "hosts_ranks",
        "ring_round_trip_4_ranks_8_bytes": {
            "across_4_hosts": across,
            "within_1_host": within,
        },
        "launch_16_ranks_on_4_hosts": {
            "command": "prun -n 4x4 true",
            "median_ms": median,
            "p99_ms": p99,
            "min_ms": ms[0],
            "runs": launches,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
