//! A real master and an emulated fleet ("10,000 nodes on one master"): `gang-agent
//! --emulate` nodes, 1,024 to a process, their ranks played. For each mesh of
//! `FLEET_MESHES` (default 32x32,64x64): the time until every node is up, the idle cost
//! (the master's and the agent processes' CPU over `FLEET_IDLE_S` seconds, default 10,
//! from `FLEET_SETTLE_S`, default 100, after all came up: the master's agent-port idle
//! timeout has closed the connections nobody uses and a sweep has given their memory back),
//! the master's memory (idle, and after the launches) and descriptors, the most descriptors
//! one fleet process holds (idle and at the end), and `prun -n WxH true` over the whole mesh
//! `FLEET_LAUNCHES` times (default 10), median and p99, with the master's CPU per launch;
//! then `prun -n WxH fence ROUNDS BYTES` `FLEET_FENCE_RUNS` times (default 3; 0: none),
//! ROUNDS `FLEET_FENCES` (default 20), BYTES `FLEET_FENCE_BYTES` (default 450, a business
//! card): the fence times rank 0 saw (the first of each run apart: it waits for the
//! launch's slowest rank), the bytes of fence messages through the master per fence
//! (`gang_fence_bytes_total`, both paths), the master's CPU and the fleet's per fence
//! (each run's fence times also go to stderr in order). Where fences are gathered is the
//! master's: add `--fences agents` to `FLEET_MASTER_ARGS`.
//! Needs the release binaries, built beforehand:
//! `cargo build --release -p gang-master -p gang-agent -p gang-cli`, then
//! `cargo bench -p gang-benches --bench emulated_fleet`.
//! `FLEET_MASTER_ARGS`: extra gang-master flags, space-separated (e.g. `--heartbeat-ms 2000
//! --node-timeout-ms 10000`). `FLEET_FANOUTS` (default 0,16): each mesh is run once per
//! `--fanout-width` of the list, one after the other (0: the master calls every agent).
//! `FLEET_NICE` (default 10): the fleet's processes are niced this much once up, so the
//! master (nice 0) is served first on the shared cores and its figures are its own;
//! `FLEET_MASTER_CPUS` / `FLEET_FLEET_CPUS` (taskset lists, default none) pin them too.
//! The master's CPU and the fleet's are reported apart, per launched rank and per node.
//! Prints one JSON line `{"bench":"emulated_fleet",...}` per mesh and width.

use std::process::Command;
use std::time::{Duration, Instant};

use gang_benches::cores::{nice_and_pin, parse_cpus};
use gang_benches::{
    env_or, median_p99, metric_sum, open_fds, prebuilt_release_bins, proc_cpu, status_kb,
};
use gang_local::{LocalCluster, LocalClusterOptions};
use serde_json::Value;

fn main() {
    let meshes: String = env_or("FLEET_MESHES", "32x32,64x64".to_string());
    let idle_s: u64 = env_or("FLEET_IDLE_S", 10);
    let settle_s: u64 = env_or("FLEET_SETTLE_S", 100);
    let launches: usize = env_or("FLEET_LAUNCHES", 10);
    let per: u32 = env_or("FLEET_PER_PROCESS", 1024);
    let master_args: Vec<String> = env_or("FLEET_MASTER_ARGS", String::new())
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let fanouts: String = env_or("FLEET_FANOUTS", "0,16".to_string());
    let fences = Fences {
        runs: env_or("FLEET_FENCE_RUNS", 3),
        rounds: env_or("FLEET_FENCES", 20),
        bytes: env_or("FLEET_FENCE_BYTES", 450),
    };
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl", "prun"]);
    for mesh in meshes.split(',') {
        for width in fanouts.split(',') {
            run(
                mesh,
                width,
                &bins,
                &master_args,
                (settle_s, idle_s, launches, per),
                &fences,
            );
        }
    }
}

struct Fences {
    runs: usize,
    rounds: u32,
    bytes: usize,
}

fn fence_bytes(c: &LocalCluster) -> f64 {
    metric_sum(c, "gang_fence_bytes_total{", "")
}

/// `prun -n MESH fence ...` `f.runs` times: the JSON figures.
fn fence_runs(
    c: &LocalCluster,
    (master, agents): (u32, &[u32]),
    bins: &std::path::Path,
    mesh: &str,
    f: &Fences,
) -> Value {
    if f.runs == 0 {
        return Value::Null;
    }
    let fleet_cpu = || agents.iter().map(|&p| proc_cpu(p).0).sum::<f64>();
    let (bytes0, cpu0, fleet0) = (fence_bytes(c), proc_cpu(master).0, fleet_cpu());
    let (mut first, mut rest, mut failed) = (vec![], vec![], 0);
    for _ in 0..f.runs {
        let out = Command::new(bins.join("prun"))
            .args(["-n", mesh, "--", "fence"])
            .args([f.rounds.to_string(), f.bytes.to_string()])
            .env("GANG_MASTER", c.master_addr())
            .output()
            .expect("prun runs");
        let line: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        let times = line.as_ref().and_then(|l| l["fence_ms"].as_array());
        match times {
            Some(t) if out.status.success() => {
                let t: Vec<f64> = t.iter().filter_map(Value::as_f64).collect();
                // Each run's fences in order: an outlier's place tells a slow first
                // connection from a periodic stall.
                let each: Vec<u64> = t.iter().map(|ms| ms.round() as u64).collect();
                eprintln!("fences of one run, ms: {each:?}");
                first.extend(t.first());
                rest.extend(t.iter().skip(1));
            }
            _ => {
                failed += 1;
                eprintln!(
                    "prun fence failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let fences = (f.runs - failed) as f64 * f64::from(f.rounds);
    let quantiles = |xs: &mut Vec<f64>| {
        if xs.is_empty() {
            return Value::Null;
        }
        let (m, p) = median_p99(xs);
        serde_json::json!({"median": m, "p99": p, "n": xs.len()})
    };
    serde_json::json!({
        "rounds": f.rounds, "bytes_put": f.bytes, "runs": f.runs, "failed": failed,
        "first_fence_ms": quantiles(&mut first),
        "fence_ms": quantiles(&mut rest),
        "master_bytes_per_fence": (fence_bytes(c) - bytes0) / fences.max(1.0),
        "master_cpu_per_fence_ms": (proc_cpu(master).0 - cpu0) * 1e3 / fences.max(1.0),
        // All the fleet's CPU over the runs (launches and exits included) a fence: on
        // 2 cores a fence can take no less than half of it.
        "fleet_cpu_per_fence_ms": (fleet_cpu() - fleet0) * 1e3 / fences.max(1.0),
    })
}

fn run(
    mesh: &str,
    width: &str,
    bins: &std::path::Path,
    master_args: &[String],
    (settle_s, idle_s, launches, per): (u64, u64, usize, u32),
    fences: &Fences,
) {
    {
        let (w, h) = mesh
            .split_once('x')
            .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
            .expect("FLEET_MESHES: WxH,WxH,...");
        let mut master_args = master_args.to_vec();
        master_args.extend(["--fanout-width".to_string(), width.to_string()]);
        let opts = LocalClusterOptions {
            bin_dir: Some(bins.to_path_buf()),
            emulate: Some(per),
            master_args: master_args.clone(),
            nodes_up_timeout: Duration::from_secs(900),
            env: vec![("RUST_LOG".into(), "warn".into())],
            ..LocalClusterOptions::default()
        };
        let t = Instant::now();
        let mut c = match LocalCluster::start((w, h), opts) {
            Ok(c) => c,
            Err(e) => {
                let line = serde_json::json!({"bench": "emulated_fleet", "mesh": mesh,
                    "fanout_width": width,
                    "error": format!("{e:#}").lines().take(6).collect::<Vec<_>>()});
                println!("{line}");
                return;
            }
        };
        let up_s = t.elapsed().as_secs_f64();
        let master = c.master_pid().expect("master");
        let agents: Vec<u32> = c.pids().into_iter().filter(|&p| p != master).collect();
        let agents_cpu = || agents.iter().map(|&p| proc_cpu(p).0).sum::<f64>();
        let placed = place(master, &agents);
        let nodes = f64::from(w * h);

        // Idle: nothing runs, and what coming up left behind has settled (the agent
        // port's idle timeout, 60 s, closed connections nobody uses; a sweep, every 30 s,
        // gave their memory back).
        std::thread::sleep(Duration::from_secs(settle_s));
        let (m0, a0, t0) = (proc_cpu(master).0, agents_cpu(), Instant::now());
        std::thread::sleep(Duration::from_secs(idle_s));
        let secs = t0.elapsed().as_secs_f64();
        let idle_master = (proc_cpu(master).0 - m0) / secs;
        let idle_agents = (agents_cpu() - a0) / secs;
        let idle_rss_kb = status_kb(master, "VmRSS:");
        let fleet_fds = || agents.iter().map(|&p| open_fds(p)).max().unwrap_or(0);
        let idle_fleet_fds = fleet_fds();

        let mut ms = vec![];
        let mut failed = 0;
        let (m1, a1) = (proc_cpu(master).0, agents_cpu());
        let calls0 = agent_calls(&c);
        for _ in 0..launches {
            let t = Instant::now();
            let out = Command::new(bins.join("prun"))
                .args(["-n", mesh, "--", "true"])
                .env("GANG_MASTER", c.master_addr())
                .output()
                .expect("prun runs");
            if !out.status.success() {
                failed += 1;
                eprintln!("prun failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let master_cpu_per_launch_ms = (proc_cpu(master).0 - m1) * 1e3 / launches as f64;
        let agents_cpu_per_launch_ms = (agents_cpu() - a1) * 1e3 / launches as f64;
        let calls = per_rank(&agent_calls(&c), &calls0, launches as f64 * nodes);
        let (median, p99) = median_p99(&mut ms);
        let fence = fence_runs(&c, (master, &agents), bins, mesh, fences);
        let line = serde_json::json!({
            "bench": "emulated_fleet",
            "mesh": mesh,
            "nodes": w * h,
            "fanout_width": width,
            "master_args": master_args,
            "agent_processes": agents.len(),
            "all_up_s": up_s,
            "idle_cpu_cores": {"master": idle_master, "agents": idle_agents},
            "master": {"idle_rss_kb": idle_rss_kb, "rss_kb": status_kb(master, "VmRSS:"),
                       "fds": open_fds(master), "threads": status_kb(master, "Threads:")},
            "prun_true_ms": {"median": median, "p99": p99, "runs": launches, "failed": failed},
            "master_cpu_per_launch_ms": master_cpu_per_launch_ms,
            "master_cpu_per_rank_ms": master_cpu_per_launch_ms / nodes,
            "agents_cpu_per_launch_ms": agents_cpu_per_launch_ms,
            "master_calls_per_rank": calls,
            "cores": placed,
            "fleet_per_node": {
                "idle_cpu_us_per_s": idle_agents * 1e6 / nodes,
                "rss_kb": agents.iter().map(|&p| status_kb(p, "VmRSS:")).sum::<u64>() as f64 / nodes,
                "cpu_per_launch_us": agents_cpu_per_launch_ms * 1e3 / nodes,
                "max_fds_a_process": {"idle": idle_fleet_fds, "end": fleet_fds()},
            },
            "fence": fence,
        });
        println!("{line}");
        // A slow teardown is worth knowing, but the figures above stand.
        if let Err(e) = c.shutdown() {
            eprintln!("emulated_fleet {mesh}: shutdown: {e:#}");
        }
    }
}

/// Nice (and pin, if asked) the fleet and pin the master: what was done, as JSON.
fn place(master: u32, agents: &[u32]) -> Value {
    let nice: i32 = env_or("FLEET_NICE", 10);
    let cpus = |var: &str| {
        let list: String = env_or(var, String::new());
        let cpus = parse_cpus(&list).unwrap_or_else(|e| panic!("{var}: {e}"));
        (!cpus.is_empty()).then_some(cpus)
    };
    let (master_cpus, fleet_cpus) = (cpus("FLEET_MASTER_CPUS"), cpus("FLEET_FLEET_CPUS"));
    if let Some(c) = &master_cpus {
        nice_and_pin(master, 0, Some(c)).expect("pin the master");
    }
    let threads: usize = agents
        .iter()
        .map(|&p| nice_and_pin(p, nice, fleet_cpus.as_deref()).expect("nice the fleet"))
        .sum();
    serde_json::json!({"fleet_nice": nice, "fleet_threads": threads,
        "master_cpus": master_cpus, "fleet_cpus": fleet_cpus})
}

/// `gang_agent_calls_total` by method (the calls agents made on the master), and
/// `gang_direct_calls_total` by work (the master's calls to one agent each), by label value.
fn agent_calls(c: &LocalCluster) -> std::collections::BTreeMap<String, f64> {
    let text = gang_local::http_get(c.metrics_addr(), "/metrics");
    let label = |l: &str, key: &str| -> Option<String> {
        Some(l.split(key).nth(1)?.split('"').next()?.to_string())
    };
    text.lines()
        .filter_map(|l| {
            let method = if l.starts_with("gang_agent_calls_total{") {
                label(l, "method=\"")?
            } else if l.starts_with("gang_direct_calls_total{") {
                format!("master to agent: {}", label(l, "work=\"")?)
            } else {
                return None;
            };
            Some((method, l.rsplit(' ').next()?.parse::<f64>().ok()?))
        })
        .collect()
}

/// What each method grew by, per launched rank.
fn per_rank(
    after: &std::collections::BTreeMap<String, f64>,
    before: &std::collections::BTreeMap<String, f64>,
    ranks: f64,
) -> Value {
    after
        .iter()
        .map(|(m, v)| {
            (
                m.clone(),
                Value::from((v - before.get(m).unwrap_or(&0.0)) / ranks.max(1.0)),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}
