//! Masters on etcd (release binaries, a real 3-member etcd on loopback, a 2x2 cluster):
//!
//! - failover: ROUNDS times, SIGKILL of the leading master, then until the standby serves
//!   (its ready file: it leads, has its state and listens; each standby's warm copy is
//!   awaited before the kill) and until every agent has
//!   registered with it again; the killed master comes back as the next standby. Two
//!   CPU-bound 2x2 jobs alternate in two slices (100 ms quantum) all along: their turns per
//!   second (the job running alone changed, from /proc CPU times sampled every 2 ms) in
//!   the 2 s before each kill, from the kill until the standby serves, and in the 2 s
//!   after;
//! - submits over gRPC from CLIENTS concurrent clients (held jobs, so that nothing runs),
//!   SUBMITS in all, against the same cluster with its state in SQLite and in etcd: rate and
//!   per-call latency, side by side; and etcd alone under the same clients (each committing
//!   one job row at a time in a transaction guarded as the leader's): the floor on etcd.
//!
//! - acknowledged submissions through kills: KILLS times, 4 gRPC clients submit 1,000 jobs
//!   each (held, with client tokens, retried across the failover on whichever master
//!   answers) while the leader is SIGKILLed halfway, a 1x1 job running throughout; then
//!   every acknowledged job must be in the new leader's list once, and nothing else, and
//!   the running job's rank the one started before the first kill
//!   (`gang_e2e::failover`, which CI runs at full size in `tests/etcd.rs`).
//!
//! Prints JSON. Env: ROUNDS (default 10), CLIENTS (8), SUBMITS (2000), LEASE_S (1),
//! KILLS (5), PER_CLIENT (1000).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, release_bins};
use gang_e2e::etcd_cluster::{EtcdCluster, free_port};
use gang_e2e::failover::{Standby, kills_under_submissions, standby, wait_file};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::Signal;

/// Both masters, as clients are told of them.
struct Masters(String);

impl gang_e2e::Master for Masters {
    fn master(&self) -> String {
        self.0.clone()
    }
}

/// When the job running alone changed (A alone, then B alone, ...), sampled every 2 ms
/// until `stop`.
fn turns(a: &[i32], b: &[i32], stop: &std::sync::atomic::AtomicBool) -> Vec<Instant> {
    let cpu = |p: &[i32]| p.iter().filter_map(|&p| gang_e2e::cpu_ns(p)).sum::<u64>();
    let (mut la, mut lb, mut lt) = (cpu(a), cpu(b), Instant::now());
    let mut alone: Option<bool> = None;
    let mut out = vec![];
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(2));
        let (ca, cb, now) = (cpu(a), cpu(b), Instant::now());
        // Ran: used at least a quarter of a CPU over the interval.
        let ran = |used: u64| used as f64 > (now - lt).as_nanos() as f64 / 4.0;
        let (ra, rb) = (ran(ca.saturating_sub(la)), ran(cb.saturating_sub(lb)));
        if ra != rb {
            if alone.is_some_and(|x| x != ra) {
                out.push(now);
            }
            alone = Some(ra);
        }
        (la, lb, lt) = (ca, cb, now);
    }
    out
}

fn per_second(ts: &[Instant], from: Instant, to: Instant) -> f64 {
    let n = ts.iter().filter(|&&t| t >= from && t < to).count();
    n as f64 / (to - from).as_secs_f64().max(1e-9)
}

fn options(
    state: PathBuf,
    extra: &[String],
    standby_agents: Vec<std::net::SocketAddr>,
) -> LocalClusterOptions {
    let mut master_args: Vec<String> = ["--heartbeat-ms", "100", "--etcd-trusted-network"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    master_args.extend(extra.iter().cloned());
    LocalClusterOptions {
        bin_dir: Some(release_bins()),
        state: Some(state),
        master_args,
        standby_agent_ports: standby_agents,
        ..LocalClusterOptions::default()
    }
}

async fn nodes_up(socket: &Path) -> usize {
    let target = Target::parse(&format!("unix:{}", socket.display())).unwrap();
    let Ok(ch) = client::connect(&target, &Default::default(), Duration::from_secs(1)).await else {
        return 0;
    };
    let mut admin = v1::admin_service_client::AdminServiceClient::new(ch);
    match admin.list_nodes(v1::ListNodesRequest {}).await {
        Ok(r) => r
            .into_inner()
            .nodes
            .iter()
            .filter(|n| n.state() == v1::NodeState::Up)
            .count(),
        Err(_) => 0,
    }
}

/// The 2x2 cluster on etcd the failover rounds run on: MPL 2, 100 ms quanta, the master's
/// etcd lease `lease` seconds, a standby's agent port ready.
fn failover_cluster(
    etcd: &EtcdCluster,
    dir: &std::path::Path,
    lease: &str,
    b_agents: std::net::SocketAddr,
) -> LocalCluster {
    let extra: Vec<String> = [
        "--etcd-lease-s",
        lease,
        "--output-dir",
        &dir.join("out").display().to_string(),
        "--mpl",
        "2",
        "--quantum-ms",
        "100",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    LocalCluster::start(
        (2, 2),
        options(
            PathBuf::from(etcd.url("bench/failover")),
            &extra,
            vec![b_agents],
        ),
    )
    .expect("cluster")
}

/// Turns a second in the 2 s before each kill, between the kill and a master serving,
/// and in the 2 s after.
fn turns_per_second(ts: &[Instant], windows: &[(Instant, Instant)]) -> serde_json::Value {
    let (mut before, mut during, mut after) = (vec![], vec![], vec![]);
    for &(kill, served) in windows {
        before.push(per_second(ts, kill - Duration::from_secs(2), kill));
        during.push(per_second(ts, kill, served));
        after.push(per_second(ts, served, served + Duration::from_secs(2)));
    }
    let (b50, b99) = median_p99(&mut before);
    let (d50, d99) = median_p99(&mut during);
    let (a50, a99) = median_p99(&mut after);
    let lowest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    serde_json::json!({
        "before": {"median": b50, "p99": b99},
        "during": {"median": d50, "p99": d99, "lowest": lowest(&during)},
        "after": {"median": a50, "p99": a99},
    })
}

fn failover(
    rt: &tokio::runtime::Runtime,
    etcd: &EtcdCluster,
    rounds: usize,
    lease: &str,
) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let b_agents = free_port();
    let mut c = failover_cluster(etcd, dir.path(), lease, b_agents);
    let a_agents = c.agents_addr().unwrap();
    let spawn =
        |c: &LocalCluster, n: usize, agents| standby(c, dir.path(), &format!("m{n}"), agents);
    let mut standby = spawn(&c, 0, b_agents);
    standby.wait_warm(Duration::from_secs(30));
    // Two CPU-bound jobs, one per slice.
    let jobs_dir = tempfile::tempdir().unwrap();
    let busy = |name: &str| {
        let d = jobs_dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        gang_e2e::submit(
            &Masters(c.master_addr().to_string()),
            "2x2",
            &["sh", "-c", &gang_e2e::busy_script(&d)],
        );
        gang_e2e::rank_pids(&d, 4, Duration::from_secs(30))
    };
    let (pa, pb) = (busy("a"), busy("b"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || turns(&pa, &pb, &stop))
    };
    // Switching before the first kill, too.
    std::thread::sleep(Duration::from_millis(2500));
    let mut windows = vec![];
    let (mut serving, mut all_up) = (vec![], vec![]);
    let mut leader: Option<Standby> = None;
    for round in 1..=rounds {
        let killed_agents = match leader.take() {
            None => {
                c.stop_master(Signal::SIGKILL).unwrap();
                a_agents
            }
            Some(mut l) => {
                l.kill();
                l.agents
            }
        };
        let t = Instant::now();
        wait_file(&standby.ready, Duration::from_secs(30));
        serving.push(t.elapsed().as_secs_f64() * 1e3);
        windows.push((t, Instant::now()));
        while rt.block_on(nodes_up(&standby.socket)) < 4 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "agents did not come back"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        all_up.push(t.elapsed().as_secs_f64() * 1e3);
        eprintln!(
            "round {round}: serving {:.0} ms, all agents {:.0} ms",
            serving[round - 1],
            all_up[round - 1]
        );
        let next = spawn(&c, round, killed_agents);
        leader = Some(std::mem::replace(&mut standby, next));
        // 2 s of switching after it, and before the next kill (the next standby warm).
        std::thread::sleep(Duration::from_secs(2));
        standby.wait_warm(Duration::from_secs(30));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ts = sampler.join().unwrap();
    let turns = turns_per_second(&ts, &windows);
    for mut s in [Some(standby), leader].into_iter().flatten() {
        s.kill();
    }
    let (s50, s99) = median_p99(&mut serving);
    let (u50, u99) = median_p99(&mut all_up);
    serde_json::json!({
        "rounds": rounds,
        "lease_s": lease,
        "kill_to_serving_ms": {"median": s50, "p99": s99},
        "kill_to_every_agent_back_ms": {"median": u50, "p99": u99},
        "turns_per_second": turns,
    })
}

/// Every task's latencies, together.
async fn joined(tasks: Vec<tokio::task::JoinHandle<Vec<f64>>>) -> Vec<f64> {
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// A closed-loop run's figures: `n` calls (named `what`) by `clients`, rate and latency.
fn closed_loop(
    what: &str,
    n: usize,
    clients: usize,
    elapsed: Duration,
    lat: &mut [f64],
) -> serde_json::Value {
    let (l50, l99) = median_p99(lat);
    serde_json::json!({
        what: n,
        "clients": clients,
        "per_second": n as f64 / elapsed.as_secs_f64(),
        "latency_ms": {"median": l50, "p99": l99},
    })
}

fn submits(
    rt: &tokio::runtime::Runtime,
    state: PathBuf,
    extra: &[String],
    clients: usize,
    total: usize,
) -> serde_json::Value {
    let c = LocalCluster::start((2, 2), options(state, extra, vec![])).expect("cluster");
    let per = total / clients;
    let (elapsed, mut lat) = rt.block_on(async {
        let mut tasks = vec![];
        let t0 = Instant::now();
        for _ in 0..clients {
            let ch = c.channel().await.unwrap();
            tasks.push(tokio::spawn(async move {
                let mut jc = JobServiceClient::new(ch);
                let mut lat = Vec::with_capacity(per);
                for _ in 0..per {
                    let t = Instant::now();
                    jc.submit(gang_e2e::failover::held_job(""))
                        .await
                        .expect("submitted");
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                }
                lat
            }));
        }
        (t0.elapsed(), joined(tasks).await)
    });
    closed_loop("submits", per * clients, clients, elapsed, &mut lat)
}

/// etcd alone, as the master uses it: `clients` tasks each committing one job row (a
/// realistic one, as JSON) at a time in a transaction guarded as the leader's are. The
/// floor under any master that keeps its state there, on this machine.
fn raw_etcd(
    rt: &tokio::runtime::Runtime,
    etcd: &EtcdCluster,
    clients: usize,
    total: usize,
) -> serde_json::Value {
    use gang_etcd::pb::etcdserverpb::TxnRequest;
    let per = total / clients;
    let row = serde_json::to_vec(&gang_e2e::failover::saved_job(1, "queued")).unwrap();
    let (elapsed, mut lat) = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(10)).unwrap();
        e.put(b"/bench/raw/leader", b"me").await.unwrap();
        let guard_rev = e
            .get(b"/bench/raw/leader")
            .await
            .unwrap()
            .unwrap()
            .create_revision;
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (e, row) = (e.clone(), row.clone());
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per);
                    for i in 0..per {
                        let key = format!("/bench/raw/jobs/{c}-{i:020}").into_bytes();
                        let t = Instant::now();
                        let r = e
                            .txn(TxnRequest {
                                compare: vec![gang_etcd::created_at(
                                    b"/bench/raw/leader".to_vec(),
                                    guard_rev,
                                )],
                                success: vec![gang_etcd::put_op(key, row.clone())],
                                failure: vec![],
                            })
                            .await
                            .expect("committed");
                        assert!(r.succeeded);
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    lat
                })
            })
            .collect();
        (t0.elapsed(), joined(tasks).await)
    });
    closed_loop("txns", per * clients, clients, elapsed, &mut lat)
}

fn main() {
    let rounds: usize = env_or("ROUNDS", 10);
    let clients: usize = env_or("CLIENTS", 8);
    let total: usize = env_or("SUBMITS", 2000);
    let lease: String = env_or("LEASE_S", "1".to_string());
    let kills: usize = env_or("KILLS", 5);
    let per_client: usize = env_or("PER_CLIENT", 1000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let etcd = EtcdCluster::start(3).expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    let extra: Vec<String> = [
        "--etcd-lease-s",
        &lease,
        "--output-dir",
        &dir.path().join("out").display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let outcome = kills_under_submissions(
        &rt,
        options(PathBuf::from(etcd.url("bench/kills")), &extra, vec![]),
        kills,
        per_client,
    );
    let through_kills = outcome.json();
    eprintln!("{through_kills}");
    let fo = failover(&rt, &etcd, rounds, &lease);
    let sqlite = submits(&rt, dir.path().join("state.db"), &[], clients, total);
    let on_etcd = submits(
        &rt,
        PathBuf::from(etcd.url("bench/submits")),
        &[
            "--output-dir".into(),
            dir.path().join("out").display().to_string(),
        ],
        clients,
        total,
    );
    let raw = raw_etcd(&rt, &etcd, clients, total);
    let ratio = on_etcd["per_second"].as_f64().unwrap() / sqlite["per_second"].as_f64().unwrap();
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "failover": fo,
            "submissions_through_kills": through_kills,
            "submit_sqlite": sqlite,
            "submit_etcd": on_etcd,
            "etcd_alone_guarded_txns": raw,
            "etcd_over_sqlite_rate": ratio,
        }))
        .unwrap()
    );
}
