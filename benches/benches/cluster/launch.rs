//! Launch latency and submission rate on a real 4x4 loopback cluster (release binaries).
//!
//! (1) For 1x1, 2x2 and 4x4 jobs, interleaved: time from spawning `prun` to the moment the
//!     last rank runs (each rank runs `date +%s%N`), and to prun's exit. RUNS per shape,
//!     each through the master's Unix socket (a local user) and through its TLS port with
//!     a token (a remote user), interleaved too, so the cost of TLS is read side by side.
//! (2) Durable submissions per second, with every node drained so jobs only queue:
//!     `prun --detach` processes from CLIENTS parallel clients, and the gRPC Submit call
//!     from 8 concurrent API clients (what a portal does). Each answer comes after commit.
//!
//! Prints JSON. Env: RUNS (default 60), SUBMITS (per client, default 100).

use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use gang_benches::{env_or, median_p99, release_bins};
use gang_core::quantile::nearest_rank;
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::v1;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

fn pct(xs: &mut [f64]) -> serde_json::Value {
    let (median, p99) = median_p99(xs);
    let p95 = nearest_rank(xs, 0.95).expect("median_p99 took a non-empty sample");
    serde_json::json!({"median_ms": median, "p95_ms": p95, "p99_ms": p99, "min_ms": xs[0], "runs": xs.len()})
}

/// How the runs reach the master: through its Unix socket (a local user), and through its
/// TLS port with a token (a remote user), each as the environment of a client.
type Transports = [(&'static str, Vec<(&'static str, String)>); 2];

fn transports(c: &LocalCluster, bins: &std::path::Path, home: &std::path::Path) -> Transports {
    // A token for the remote (TLS) runs, issued over the socket as `gangctl token` does.
    let token = Command::new(bins.join("gangctl"))
        .args(["token", "--ttl", "1h"])
        .env("GANG_MASTER", c.master_addr())
        .output()
        .unwrap();
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    let tls_url = c.master_tls_addr().expect("the master's TLS port");
    let ca = c.ca();
    [
        (
            "unix_socket",
            vec![("GANG_MASTER", c.master_addr().to_string())],
        ),
        (
            "tls_token",
            vec![
                ("GANG_MASTER", tls_url),
                ("GANG_CA", ca.display().to_string()),
                ("GANG_TOKEN", token),
                // No client config or saved token of the user running the bench.
                ("HOME", home.display().to_string()),
            ],
        ),
    ]
}

/// (1) launch latency, shapes and transports interleaved so noise hits them alike.
fn launch_latency(
    prun: &std::path::Path,
    transports: &Transports,
    runs: usize,
) -> Vec<serde_json::Value> {
    let shapes = ["1x1", "2x2", "4x4"];
    let cases: Vec<(usize, usize)> = (0..shapes.len())
        .flat_map(|s| (0..transports.len()).map(move |t| (s, t)))
        .collect();
    let mut to_running: Vec<Vec<f64>> = vec![vec![]; cases.len()];
    let mut to_exit: Vec<Vec<f64>> = vec![vec![]; cases.len()];
    for i in 0..runs + 5 {
        for (k, &(s, t)) in cases.iter().enumerate() {
            let (running, exit) = one_launch(prun, shapes[s], &transports[t].1);
            if i >= 5 {
                to_running[k].push(running);
                to_exit[k].push(exit);
            }
        }
    }
    cases
        .iter()
        .enumerate()
        .map(|(k, &(s, t))| {
            serde_json::json!({"shape": shapes[s], "client": transports[t].0,
                "prun_start_to_all_ranks_running": pct(&mut to_running[k]),
                "prun_start_to_exit": pct(&mut to_exit[k])})
        })
        .collect()
}

/// One `prun` of `shape`: milliseconds from its spawn to the last rank running, and to
/// its exit.
fn one_launch(prun: &std::path::Path, shape: &str, env: &[(&str, String)]) -> (f64, f64) {
    let t0 = now_ns();
    let start = Instant::now();
    let out = Command::new(prun)
        .args(["-n", shape, "--label", "--", "date", "+%s%N"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let total = start.elapsed().as_secs_f64() * 1e3;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1)?.trim().parse::<i128>().ok())
        .max()
        .expect("ranks printed their start time");
    ((last - t0) as f64 / 1e6, total)
}

/// Every node drained: jobs are accepted and queued only.
fn drain_all(gangctl: &std::path::Path, c: &LocalCluster) {
    for y in 0..4 {
        for x in 0..4 {
            let st = Command::new(gangctl)
                .args(["drain", &format!("{x},{y}")])
                .env("GANG_MASTER", c.master_addr())
                .output()
                .unwrap();
            assert!(st.status.success());
        }
    }
}

/// Jobs a second submitted by `prun --detach` from `clients` parallel clients.
fn prun_rate(prun: &std::path::Path, master: &str, clients: usize, per_client: usize) -> f64 {
    let t = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let prun = prun.to_path_buf();
            let master = master.to_string();
            std::thread::spawn(move || {
                for _ in 0..per_client {
                    let out = Command::new(&prun)
                        .args(["-n", "1", "--detach", "--", "true"])
                        .env("GANG_MASTER", &master)
                        .output()
                        .unwrap();
                    assert!(out.status.success());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    (clients * per_client) as f64 / t.elapsed().as_secs_f64()
}

/// Jobs a second submitted by the gRPC Submit call from `api_clients` concurrent clients
/// (what a portal does).
fn api_rate(c: &LocalCluster, api_clients: usize, api_each: usize) -> f64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ch = c.channel().await.unwrap();
        let t = Instant::now();
        let tasks: Vec<_> = (0..api_clients)
            .map(|_| {
                let mut client = v1::job_service_client::JobServiceClient::new(ch.clone());
                tokio::spawn(async move {
                    for _ in 0..api_each {
                        let spec = v1::JobSpec {
                            shape: "1".into(),
                            argv: vec!["true".into()],
                            cwd: "/".into(),
                            ..Default::default()
                        };
                        client
                            .submit(v1::SubmitRequest {
                                spec: Some(spec),
                                ..Default::default()
                            })
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        (api_clients * api_each) as f64 / t.elapsed().as_secs_f64()
    })
}

fn main() {
    let runs = env_or("RUNS", 60);
    let per_client = env_or("SUBMITS", 100);
    let bins = release_bins();
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.clone()),
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    let c = LocalCluster::start((4, 4), opts).expect("cluster");
    let prun = bins.join("prun");
    let home = tempfile::tempdir().unwrap();
    let transports = transports(&c, &bins, home.path());
    let launch = launch_latency(&prun, &transports, runs);

    // (2) submission rate with every node drained: jobs are accepted and queued only.
    drain_all(&bins.join("gangctl"), &c);
    let clients = 4;
    let prun_rate = prun_rate(&prun, c.master_addr(), clients, per_client);
    let api_clients = 8;
    let api_each = per_client * 4;
    let api_rate = api_rate(&c, api_clients, api_each);
    c.shutdown().unwrap();
    let out = serde_json::json!({
        "bench": "launch", "mesh": "4x4", "launch": launch,
        "submissions": {
            "prun_detach": {"clients": clients, "jobs": clients * per_client, "jobs_per_s": prun_rate},
            "grpc_submit": {"clients": api_clients, "jobs": api_clients * api_each, "jobs_per_s": api_rate},
            "durable": "each answer after the SQLite WAL commit (synchronous=FULL)"
        },
        "anchors": {"slurm_srun_N1_true_ms": 46, "slurm_srun_N4_ms": 72, "slurm_sbatch_jobs_per_s": 148}
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
