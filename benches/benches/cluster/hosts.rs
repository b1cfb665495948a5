//! Emulated hosts ("One host is not a cluster"): separate hosts with systemd as PID 1 on
//! this machine (gang-local's `hosts`, root only). Prints JSON:
//!
//! - `skew`: two 2x2 jobs sharing the mesh (quantum 50 ms): a recorder (a rank that
//!   notes, on the machine's monotonic clock, when it runs again after a switch-out) and
//!   a CPU-bound job. Per switch-in, the spread over the 4 ranks (p50/p99, pooled over
//!   rounds); each rank's median lag behind rank 0 (the systematic part: what a wrong
//!   clock estimate shows as; the largest minus the smallest, per round); and what
//!   `gangctl stats` reports (p50/p99 of the agents' own reports, per round). On one
//!   host (a local cluster), on 4 hosts whose clocks agree, on 4 hosts whose clocks are
//!   0, +40, -25, +15, -35 ms off (master first).
//! - `agent_restart`: `kill -9` of an agent under systemd to the restarted agent
//!   registered with the master (2 hosts; its journal says so), median and p99.
//!
//! `GANG_BENCH_ROUNDS` (default 3) rounds each. Run as root:
//! `cargo bench -p gang-benches --bench hosts`.

use std::time::{Duration, Instant};

use gang_benches::env_or;
use gang_e2e::{Master, gangctl_json, submit, switch_in, wait_for, wait_state};
use gang_local::hosts::{ClockSkew, EmulatedHosts, HostsOptions};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);

struct Round {
    spreads: Vec<i64>,
    systematic: i64,
    stats_p50: i64,
    stats_p99: i64,
}

fn measure(c: &impl Master, dir: &std::path::Path) -> Round {
    let script = dir.join("recorder.py");
    std::fs::write(&script, switch_in::RECORDER).unwrap();
    let recorder = submit(
        c,
        "2x2",
        &["python3", script.to_str().unwrap(), dir.to_str().unwrap()],
    );
    let busy = submit(c, "2x2", &["sh", "-c", "while :; do :; done"]);
    wait_state(c, recorder, "running", LIMIT);
    wait_state(c, busy, "running", LIMIT);
    let spreads = wait_for(LIMIT, "100 switch-ins seen by every rank", || {
        let s = switch_in::spreads(dir, 4);
        (s.len() >= 100).then_some(s)
    });
    let lags = switch_in::lags(dir, 4);
    let stats = gangctl_json(c, &["stats"]).unwrap();
    for id in [recorder, busy] {
        gang_e2e::gangctl(c, &["cancel", &id.to_string()]);
    }
    Round {
        spreads,
        systematic: lags.iter().max().unwrap() - lags.iter().min().unwrap(),
        stats_p50: stats["skew"]["p50_ns"].as_i64().unwrap_or(0),
        stats_p99: stats["skew"]["p99_ns"].as_i64().unwrap_or(0),
    }
}

fn shared_dir(bins: &std::path::Path) -> tempfile::TempDir {
    let base = bins.join("host-bench");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new()
        .prefix("skew-")
        .tempdir_in(base)
        .unwrap()
}

fn hosts(bins: &std::path::Path, w: u32, h: u32, k: u32, clocks: Option<&[i64]>) -> EmulatedHosts {
    let opts = HostsOptions {
        hosts: k,
        bin_dir: Some(bins.to_path_buf()),
        boot_timeout: LIMIT,
        clocks: clocks.map(|c| {
            c.iter()
                .map(|&ms| ClockSkew {
                    offset_ns: ms * 1_000_000,
                    drift_ppm: 0.0,
                })
                .collect()
        }),
        ..HostsOptions::default()
    };
    EmulatedHosts::start((w, h), opts).expect("hosts boot")
}

fn summary(rounds: &[Round]) -> serde_json::Value {
    let pooled: Vec<i64> = rounds.iter().flat_map(|r| r.spreads.clone()).collect();
    let us = |v: i64| v / 1000;
    json!({
        "switch_ins": pooled.len(),
        "spread_p50_us": us(switch_in::quantile(&pooled, 0.5)),
        "spread_p99_us": us(switch_in::quantile(&pooled, 0.99)),
        "systematic_us": rounds.iter().map(|r| us(r.systematic)).collect::<Vec<_>>(),
        "stats_p50_us": rounds.iter().map(|r| us(r.stats_p50)).collect::<Vec<_>>(),
        "stats_p99_us": rounds.iter().map(|r| us(r.stats_p99)).collect::<Vec<_>>(),
    })
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the hosts bench needs root (emulated hosts are namespaces and systemd)");
        std::process::exit(2);
    }
    let bins = gang_benches::release_bins();
    let rounds: usize = env_or("GANG_BENCH_ROUNDS", 3);
    let offsets = [0, 40, -25, 15, -35];
    let mut out = serde_json::Map::new();

    let mut one = Vec::new();
    for _ in 0..rounds {
        let c = gang_local::LocalCluster::start(
            (2, 2),
            gang_local::LocalClusterOptions {
                bin_dir: Some(bins.clone()),
                ..Default::default()
            },
        )
        .expect("local cluster");
        let dir = shared_dir(&bins);
        one.push(measure(&c, dir.path()));
        c.shutdown().unwrap();
    }
    out.insert("one_host".into(), summary(&one));
    for (name, clocks) in [
        ("hosts_clocks_agree", None),
        ("hosts_clocks_off", Some(&offsets[..])),
    ] {
        let mut r = Vec::new();
        for _ in 0..rounds {
            let c = hosts(&bins, 2, 2, 4, clocks);
            let dir = shared_dir(&bins);
            r.push(measure(&c, dir.path()));
            c.shutdown().unwrap();
        }
        out.insert(name.into(), summary(&r));
    }

    let c = hosts(&bins, 2, 1, 2, None);
    let mut restarts = Vec::new();
    for _ in 0..rounds.max(5) {
        let pid = c.unit_property(1, "gang-agent.service", "MainPID").unwrap();
        let registered = |c: &EmulatedHosts| {
            c.journal(1, "gang-agent.service")
                .matches("registered with the master")
                .count()
        };
        let before = registered(&c);
        let t = Instant::now();
        c.exec(1, &["kill", "-9", &pid]).unwrap();
        // Back when the new agent has registered (systemd restarts it after RestartSec,
        // 2 s; the master may not even have counted the node lost by then).
        wait_for(LIMIT, "the restarted agent registered", || {
            (registered(&c) > before).then_some(())
        });
        restarts.push(t.elapsed().as_millis() as i64);
    }
    c.shutdown().unwrap();
    out.insert(
        "agent_restart".into(),
        json!({
            "runs": restarts.len(),
            "kill_to_node_up_ms_p50": switch_in::quantile(&restarts, 0.5),
            "kill_to_node_up_ms_p99": switch_in::quantile(&restarts, 0.99),
            "all_ms": restarts,
        }),
    );
    println!("{}", serde_json::Value::Object(out));
}
