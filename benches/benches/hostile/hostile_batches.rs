//! The master's rounds (what its reactor applies and saves together; the bench and its
//! JSON keys keep the old word, batch) under one user's hostile requests (issue "Jobs
//! outlive the master's bad moments, and no user can cause one"): a real master (release binaries, a 2x2
//! cluster, default limits) running a victim's job, sent in turn
//! - a held array of 1,001 tasks, each with a 256 KiB command line and a 1 MiB
//!   environment (inside the limits);
//! - five held arrays of 1,001 tasks and a 1,001-task array depending on all five, then
//!   left alone for `HOSTILE_IDLE_S` seconds (what the master spends on them by itself);
//! - 8 concurrent `gangctl jobs --all` of the whole history (every page).
//!
//! Printed side by side with the same figures before the requests: the master's longest
//! round and its p99 (from its `gang_master_batch_seconds` histogram), its peak RSS,
//! its CPU while idle, GetJob's latency (median, p99 over `HOSTILE_GETS`), the listings'
//! time, and whether the victim's job completed.
//!
//! Needs the release binaries, built beforehand:
//! `cargo build --release -p gang-master -p gang-agent -p gang-cli`, then
//! `cargo bench -p gang-benches --bench hostile_batches`.
//! Env: HOSTILE_IDLE_S (10), HOSTILE_GETS (200).
//! Prints one JSON line `{"bench":"hostile_batches",...}`.

use std::process::Command;
use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, prebuilt_release_bins, proc_cpu, status_kb};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, MasterChannel, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;

/// The master's round histogram (`gang_master_batch_seconds`): (count, p99 in ms, sum in
/// s), and its longest round (ms).
fn rounds(c: &LocalCluster) -> (u64, f64, f64) {
    let text = gang_local::http_get(c.metrics_addr(), "/metrics");
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut count = 0;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("gang_master_batch_seconds_bucket{le=\"") {
            let (le, n) = rest.split_once("\"} ").unwrap_or(("", "0"));
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            buckets.push((le, n.trim().parse().unwrap_or(0)));
        } else if let Some(n) = l.strip_prefix("gang_master_batch_seconds_count ") {
            count = n.trim().parse().unwrap_or(0);
        }
    }
    let want = (count as f64 * 0.99).ceil() as u64;
    let p99 = buckets
        .iter()
        .find(|(_, n)| *n >= want)
        .map_or(f64::NAN, |(le, _)| le * 1e3);
    let max_ms = text
        .lines()
        .find_map(|l| l.strip_prefix("gang_master_batch_max_microseconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1e3;
    (count, p99, max_ms)
}

async fn client(c: &LocalCluster) -> JobServiceClient<MasterChannel> {
    let t = Target::parse(c.master_addr()).expect("the master's address");
    JobServiceClient::new(
        client::connect(&t, &Default::default(), Duration::from_secs(5))
            .await
            .expect("the master answers"),
    )
}

fn held_array(argv: Vec<String>, env: &[(&str, String)], dependency: String) -> v1::SubmitRequest {
    v1::SubmitRequest {
        spec: Some(v1::JobSpec {
            shape: "1x1".into(),
            argv,
            cwd: "/tmp".into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            hold: dependency.is_empty(),
            array: "0-1000".into(),
            dependency,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// GetJob of `id`, `n` times: (median, p99) ms.
fn get_latency(rt: &tokio::runtime::Runtime, c: &LocalCluster, id: u64, n: usize) -> (f64, f64) {
    let mut cl = rt.block_on(client(c));
    let mut ms: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            rt.block_on(cl.get_job(v1::GetJobRequest { job_id: id }))
                .expect("GetJob");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median_p99(&mut ms)
}

/// The master's share of a core over `span`.
fn idle_cpu(pid: u32, span: Duration) -> f64 {
    let (a, _) = proc_cpu(pid);
    std::thread::sleep(span);
    let (b, _) = proc_cpu(pid);
    (b - a) / span.as_secs_f64()
}

/// 8 `gangctl jobs --all` at once, every page: the slowest's time (s) and the jobs one
/// listed (an array's waiting tasks are one line naming each task's job).
fn listings(bins: &std::path::Path, c: &LocalCluster) -> (f64, usize) {
    let t = Instant::now();
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (bin, master) = (bins.join("gangctl"), c.master_addr().to_string());
            std::thread::spawn(move || {
                Command::new(bin)
                    .args(["--output", "json", "jobs", "--all", "--limit", "1000000"])
                    .env("GANG_MASTER", master)
                    .output()
                    .expect("gangctl runs")
            })
        })
        .collect();
    let mut rows = 0;
    for r in runs {
        let out = r.join().expect("a listing");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("a JSON listing");
        rows = listed
            .as_array()
            .expect("a list")
            .iter()
            .map(|j| j["task_job_ids"].as_array().map_or(1, Vec::len))
            .sum();
    }
    (t.elapsed().as_secs_f64(), rows)
}

type Client = JobServiceClient<MasterChannel>;

/// The victim: a 1x1 job that runs through every phase. Its id.
fn submit_victim(rt: &tokio::runtime::Runtime, cl: &mut Client) -> u64 {
    rt.block_on(
        cl.submit(v1::SubmitRequest {
            spec: Some(v1::JobSpec {
                shape: "1x1".into(),
                argv: [
                    "sh",
                    "-c",
                    "for i in $(seq 1 600); do echo $i; sleep 0.1; done",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
                cwd: "/tmp".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    )
    .expect("the victim's job")
    .into_inner()
    .job
    .expect("a job")
    .id
}

/// Phase 1, the large array: milliseconds to submit it.
fn submit_large_array(rt: &tokio::runtime::Runtime, cl: &mut Client) -> f64 {
    let t = Instant::now();
    let big_argv = vec![
        "sh".into(),
        "-c".into(),
        "true".into(),
        "a".repeat((256 << 10) - 64),
    ];
    rt.block_on(cl.submit(held_array(
        big_argv,
        &[("BIG", "e".repeat((1 << 20) - 64))],
        String::new(),
    )))
    .expect("the large array");
    t.elapsed().as_secs_f64() * 1e3
}

/// Phase 2, five held arrays and one depending on them all: milliseconds to submit them and
/// the dependent array's id.
fn submit_dependency_mix(rt: &tokio::runtime::Runtime, cl: &mut Client) -> (f64, u64) {
    let mut firsts = vec![];
    let t = Instant::now();
    for _ in 0..5 {
        let a = rt
            .block_on(cl.submit(held_array(vec!["true".into()], &[], String::new())))
            .expect("a held array")
            .into_inner();
        firsts.push(a.job.expect("a job").id);
    }
    let deps = format!(
        "afterok:{}",
        firsts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(":")
    );
    let dependent = rt
        .block_on(cl.submit(held_array(vec!["true".into()], &[], deps)))
        .expect("the dependent array")
        .into_inner()
        .job
        .expect("a job")
        .id;
    (t.elapsed().as_secs_f64() * 1e3, dependent)
}

fn main() {
    let idle = Duration::from_secs(env_or("HOSTILE_IDLE_S", 10));
    let gets: usize = env_or("HOSTILE_GETS", 200);
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl"]);
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.clone()),
        env: vec![("RUST_LOG".into(), "warn".into())],
        allow_root_jobs: true,
        ..LocalClusterOptions::default()
    };
    let mut c = LocalCluster::start((2, 2), opts).expect("cluster");
    let pid = c.master_pid().expect("the master runs");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut cl = rt.block_on(client(&c));
    let victim = submit_victim(&rt, &mut cl);
    std::thread::sleep(Duration::from_secs(2));
    let before_get = get_latency(&rt, &c, victim, gets);
    let before_cpu = idle_cpu(pid, idle);
    let before_rss = status_kb(pid, "VmHWM:");
    let (before_batches, before_p99, _) = rounds(&c);

    // 1. The large array.
    let big_ms = submit_large_array(&rt, &mut cl);
    // 2. Five held arrays and one depending on them all.
    let (deps_ms, dependent) = submit_dependency_mix(&rt, &mut cl);
    let after_cpu = idle_cpu(pid, idle);
    let after_get = get_latency(&rt, &c, dependent + 500, gets);
    // 3. Everyone lists everything.
    let (listing_s, rows) = listings(&bins, &c);
    let (after_batches, after_p99, max_ms) = rounds(&c);
    let peak_rss = status_kb(pid, "VmHWM:");
    let victim_state = rt
        .block_on(cl.get_job(v1::GetJobRequest { job_id: victim }))
        .expect("the victim's job")
        .into_inner()
        .state();
    let blamed = std::fs::read_to_string(c.master_log())
        .unwrap_or_default()
        .contains("node down");
    println!(
        "{}",
        serde_json::json!({
            "bench": "hostile_batches",
            "machine": "this host, release binaries, a 2x2 local cluster",
            "before": {
                "batches": before_batches,
                "batch_p99_ms_at_most": before_p99,
                "idle_master_cpu_cores": before_cpu,
                "get_job_ms": {"median": before_get.0, "p99": before_get.1},
                "peak_rss_mib": before_rss / 1024,
            },
            "large_array_submit_ms": big_ms,
            "dependency_mix_submit_ms": deps_ms,
            "after": {
                "batches": after_batches,
                "batch_p99_ms_at_most": after_p99,
                "longest_batch_ms": max_ms,
                "idle_master_cpu_cores": after_cpu,
                "get_job_of_a_dependent_task_ms": {"median": after_get.0, "p99": after_get.1},
                "eight_listings_of_every_job_s": listing_s,
                "jobs_listed": rows,
                "peak_rss_mib": peak_rss / 1024,
            },
            "victim_job_state": format!("{victim_state:?}"),
            "victim_job_running_or_done": matches!(victim_state, v1::JobState::Running | v1::JobState::Completed),
            "a_node_blamed": blamed,
        })
    );
    c.shutdown().expect("the cluster stops");
}
