//! The master's bad moments under a running workload (issue "Jobs outlive the master's
//! bad moments"): release binaries, a real 3-member etcd, a 2x2 cluster with two masters
//! (each kept as its unit keeps it: started again when it steps down), and
//! - three long jobs in two slices (a 2x2, two 2x1), each rank writing a numbered line a
//!   quarter of a second, for as long as the bench runs;
//! - a short 1x1 job submitted every 2 s in a third slice, through whichever master leads.
//!
//! Then ROUNDS rounds, in turn: the leader SIGSTOPped for PAUSE_S (under its lease: it
//! rides it out), SIGSTOPped for LONG_PAUSE_S (past it: the other leads, and the paused
//! one steps down and stands by again), SIGKILLed (failover; it comes back as the
//! standby), and both masters killed for OUTAGE_S (no master at all) and started again.
//! After each round: how long until a master serves and every agent is registered, and
//! whether the long jobs still run. At the end the long jobs are let finish: each must
//! complete with exit 0 and every line of every rank once (lost: 0); every short job
//! acknowledged must have completed.
//!
//! Needs the release binaries (`cargo build --release -p gang-master -p gang-agent -p
//! gang-cli`), etcd-server, root. `cargo bench -p gang-benches --bench chaos`.
//! Env: ROUNDS (10), PAUSE_S (3), LONG_PAUSE_S (12), OUTAGE_S (10), KINDS (all four, in
//! turn; e.g. `KINDS=long_pause` for that kind alone).
//! Prints one JSON line `{"bench":"chaos",...}`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, prebuilt_release_bins};
use gang_e2e::etcd_cluster::{EtcdCluster, free_port};
use gang_e2e::failover::{Standby, standby, wait_file};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

async fn client(socket: &std::path::Path) -> Option<JobServiceClient<client::MasterChannel>> {
    client_within(socket, Duration::from_secs(5)).await
}

async fn client_within(
    socket: &std::path::Path,
    timeout: Duration,
) -> Option<JobServiceClient<client::MasterChannel>> {
    let t = Target::parse(&format!("unix:{}", socket.display())).ok()?;
    let ch = client::connect_with_request_timeout(
        &t,
        &Default::default(),
        Duration::from_millis(500),
        Some(timeout),
    )
    .await
    .ok()?;
    Some(JobServiceClient::new(ch))
}

/// Which of `sockets` leads now (its listing answers within a second), all asked at
/// once: a paused master must not hide the one that took over.
fn leader(rt: &tokio::runtime::Runtime, sockets: &[PathBuf]) -> Option<usize> {
    rt.block_on(async {
        let mut asks = tokio::task::JoinSet::new();
        for (i, s) in sockets.iter().cloned().enumerate() {
            asks.spawn(async move {
                let mut c = client_within(&s, Duration::from_secs(1)).await?;
                c.list_jobs(v1::ListJobsRequest {
                    states: vec![v1::JobState::Running as i32],
                    limit: 1,
                    before_id: 0,
                })
                .await
                .ok()
                .map(|_| i)
            });
        }
        let mut first = None;
        while let Some(r) = asks.join_next().await {
            first = first.or(r.ok().flatten());
        }
        first
    })
}

fn state_of(
    rt: &tokio::runtime::Runtime,
    socket: &std::path::Path,
    id: u64,
) -> Option<v1::JobInfo> {
    rt.block_on(async {
        client(socket)
            .await?
            .get_job(v1::GetJobRequest { job_id: id })
            .await
            .ok()
            .map(|r| r.into_inner())
    })
}

fn submit(
    rt: &tokio::runtime::Runtime,
    socket: &std::path::Path,
    argv: &[&str],
    shape: &str,
) -> Option<u64> {
    rt.block_on(async {
        client(socket)
            .await?
            .submit(v1::SubmitRequest {
                spec: Some(v1::JobSpec {
                    shape: shape.into(),
                    argv: argv.iter().map(|s| s.to_string()).collect(),
                    cwd: "/tmp".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .ok()?
            .into_inner()
            .job
            .map(|j| j.id)
    })
}

fn nodes_up(rt: &tokio::runtime::Runtime, socket: &std::path::Path) -> usize {
    rt.block_on(async {
        let t = Target::parse(&format!("unix:{}", socket.display())).ok()?;
        let ch = client::connect(&t, &Default::default(), Duration::from_millis(500))
            .await
            .ok()?;
        let n = gang_proto::v1::admin_service_client::AdminServiceClient::new(ch)
            .list_nodes(v1::ListNodesRequest {})
            .await
            .ok()?
            .into_inner()
            .nodes;
        Some(n.iter().filter(|n| n.state() == v1::NodeState::Up).count())
    })
    .unwrap_or(0)
}

fn main() {
    let rounds: usize = env_or("ROUNDS", 10);
    let pause = Duration::from_secs(env_or("PAUSE_S", 3));
    let long_pause = Duration::from_secs(env_or("LONG_PAUSE_S", 12));
    let outage = Duration::from_secs(env_or("OUTAGE_S", 10));
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl"]);
    let etcd = EtcdCluster::start(3).expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("output");
    let b_agents = free_port();
    let mut c = LocalCluster::start(
        (2, 2),
        LocalClusterOptions {
            bin_dir: Some(bins),
            state: Some(PathBuf::from(etcd.url("chaos"))),
            master_args: [
                "--etcd-trusted-network",
                "--mpl",
                "3",
                "--output-dir",
                out.to_str().unwrap(),
            ]
            .map(String::from)
            .to_vec(),
            standby_agent_ports: vec![b_agents],
            env: vec![("RUST_LOG".into(), "warn,gang_master=info".into())],
            ..LocalClusterOptions::default()
        },
    )
    .expect("a cluster on etcd");
    let a_agents = c.agents_addr().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every master is kept by its unit (started again when it steps down): the cluster's
    // own, which nothing would restart, hands over to the second at once (a clean stop
    // gives its lease up) and is replaced by one that is kept.
    let second = standby(&c, dir.path(), "m1", b_agents);
    wait_file(&dir.path().join("m1.log"), Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&second.log)
        .unwrap_or_default()
        .contains("standing by")
    {
        assert!(
            Instant::now() < deadline,
            "the second master did not stand by"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.stop_master(Signal::SIGTERM).unwrap();
    let first = standby(&c, dir.path(), "m0", a_agents);
    let mut masters: Vec<(Standby, PathBuf, std::net::SocketAddr)> = vec![];
    for (s, a) in [(second, b_agents), (first, a_agents)] {
        let sock = s.socket.clone();
        masters.push((s, sock, a));
    }
    let sockets = |ms: &Vec<(Standby, PathBuf, std::net::SocketAddr)>| -> Vec<PathBuf> {
        ms.iter().map(|m| m.1.clone()).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = leader(&rt, &sockets(&masters));
        if l.is_some_and(|l| nodes_up(&rt, &masters[l].1) == 4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second master did not take over with every agent (leader {l:?}): {}",
            std::fs::read_to_string(&masters[0].0.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let released = dir.path().join("release");
    // Each line names its rank: `R I`, then `R done N`.
    let long = format!(
        "i=0; while [ ! -e {r} ]; do i=$((i+1)); echo $GANG_RANK $i; sleep 0.25; done; echo $GANG_RANK done $i",
        r = released.display()
    );
    let leading = |ms: &Vec<_>| leader(&rt, &sockets(ms)).expect("a leader");
    let l0 = leading(&masters);
    let long_jobs: Vec<u64> = ["2x2", "2x1", "2x1"]
        .iter()
        .map(|shape| submit(&rt, &masters[l0].1, &["sh", "-c", &long], shape).expect("a long job"))
        .collect();
    // Short jobs, through whichever leads, all along.
    let stop = Arc::new(AtomicBool::new(false));
    // The masters' sockets of the moment (one that comes back has another).
    let current = Arc::new(std::sync::Mutex::new(sockets(&masters)));
    let shorts = {
        let (stop, current) = (stop.clone(), current.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let mut acked = vec![];
            while !stop.load(Ordering::Relaxed) {
                let all = current.lock().unwrap().clone();
                if let Some(i) = leader(&rt, &all)
                    && let Some(id) = submit(&rt, &all[i], &["true"], "1x1")
                {
                    acked.push(id);
                }
                std::thread::sleep(Duration::from_secs(2));
            }
            acked
        })
    };
    std::thread::sleep(Duration::from_secs(5));
    // KINDS (comma-separated) runs only those, in turn: to look at one kind of moment.
    let all_kinds = ["failover", "pause", "long_pause", "outage"];
    let chosen = std::env::var("KINDS").unwrap_or_default();
    let kinds: Vec<&str> = if chosen.is_empty() {
        all_kinds.to_vec()
    } else {
        chosen
            .split(',')
            .map(|k| {
                *all_kinds
                    .iter()
                    .find(|a| **a == k.trim())
                    .unwrap_or_else(|| panic!("KINDS: {k:?} is none of {all_kinds:?}"))
            })
            .collect()
    };
    let mut serving_ms = vec![];
    let mut all_up_ms = vec![];
    let mut running_after = vec![];
    let mut n = 2;
    for round in 0..rounds {
        let kind = kinds[round % kinds.len()];
        let l = leading(&masters);
        let t = Instant::now();
        // A pause runs beside the measure: it ends SIGCONT after its time, while clients
        // look for a master that serves (for a long pause, the other one).
        let mut paused = None;
        match kind {
            "pause" | "long_pause" => {
                let d = if kind == "pause" { pause } else { long_pause };
                let pid = masters[l].0.child.pid().expect("the leader runs");
                kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
                paused = Some(std::thread::spawn(move || {
                    std::thread::sleep(d);
                    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
                }));
            }
            "failover" => {
                let (mut m, _, agents) = masters.remove(l);
                m.kill();
                // The killed one comes back as the standby.
                let s = standby(&c, dir.path(), &format!("m{n}"), agents);
                n += 1;
                let sock = s.socket.clone();
                masters.push((s, sock, agents));
            }
            _ => {
                // No master at all for a while: both killed, then both started again.
                let mut agents = vec![];
                for (mut m, _, a) in masters.drain(..) {
                    m.kill();
                    agents.push(a);
                }
                std::thread::sleep(outage);
                for a in agents {
                    let s = standby(&c, dir.path(), &format!("m{n}"), a);
                    n += 1;
                    let sock = s.socket.clone();
                    masters.push((s, sock, a));
                }
            }
        }
        *current.lock().unwrap() = sockets(&masters);
        // Serving again, and every agent back.
        let deadline = Instant::now() + Duration::from_secs(120);
        let l = loop {
            if let Some(l) = leader(&rt, &sockets(&masters)) {
                break l;
            }
            assert!(
                Instant::now() < deadline,
                "round {round} ({kind}): no master serves"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        serving_ms.push(t.elapsed().as_secs_f64() * 1e3);
        while nodes_up(&rt, &masters[l].1) < 4 {
            assert!(
                Instant::now() < deadline,
                "round {round} ({kind}): agents not back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        all_up_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if let Some(p) = paused {
            p.join().unwrap();
        }
        let running = long_jobs
            .iter()
            .filter(|&&id| {
                state_of(&rt, &masters[l].1, id).is_some_and(|j| j.state() == v1::JobState::Running)
            })
            .count();
        running_after.push(running);
        eprintln!(
            "round {round} ({kind}): serving after {:.0} ms, every agent after {:.0} ms, {running} of 3 long jobs running",
            serving_ms[round], all_up_ms[round]
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    stop.store(true, Ordering::Relaxed);
    let acked = shorts.join().unwrap();
    std::fs::write(&released, b"").unwrap();
    let l = leading(&masters);
    let socket = masters[l].1.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut lost_long = 0;
    let mut whole = 0;
    for &id in &long_jobs {
        let j = loop {
            let j = state_of(&rt, &socket, id);
            if j.as_ref().is_some_and(|j| {
                !matches!(
                    j.state(),
                    v1::JobState::Running | v1::JobState::Starting | v1::JobState::Queued
                )
            }) {
                break j.unwrap();
            }
            assert!(Instant::now() < deadline, "long job {id} did not end");
            std::thread::sleep(Duration::from_millis(100));
        };
        if j.state() != v1::JobState::Completed || j.exit_code != Some(0) {
            lost_long += 1;
            eprintln!("long job {id} ended {:?}: {}", j.state(), j.reason);
            continue;
        }
        let text = String::from_utf8_lossy(
            &std::process::Command::new(prebuilt_release_bins(&["gangctl"]).join("gangctl"))
                .args(["output", &id.to_string()])
                .env("GANG_MASTER", format!("unix:{}", socket.display()))
                .output()
                .unwrap()
                .stdout,
        )
        .into_owned();
        // Each rank: 1..=n in order, then "done n": nothing lost, nothing twice.
        let ranks = (j.w * j.h) as usize;
        let mut seen: Vec<Vec<u64>> = vec![vec![]; ranks];
        let mut done: Vec<Option<u64>> = vec![None; ranks];
        for line in text.lines() {
            let mut w = line.split_whitespace();
            let (Some(r), Some(x)) = (w.next().and_then(|r| r.parse::<usize>().ok()), w.next())
            else {
                continue;
            };
            if r >= ranks {
                continue;
            }
            match (x, w.next()) {
                ("done", Some(n)) => done[r] = n.parse().ok(),
                (i, None) => seen[r].extend(i.parse::<u64>().ok()),
                _ => {}
            }
        }
        let ok = (0..ranks).all(|r| {
            let n = seen[r].len() as u64;
            done[r] == Some(n) && seen[r].iter().copied().eq(1..=n)
        });
        if ok {
            whole += 1;
        } else {
            let summary: Vec<String> = (0..ranks)
                .map(|r| {
                    let gaps = seen[r].windows(2).filter(|w| w[1] != w[0] + 1).count();
                    format!(
                        "rank {r}: {} lines, first {:?}, last {:?}, {gaps} gaps, done {:?}",
                        seen[r].len(),
                        seen[r].first(),
                        seen[r].last(),
                        done[r]
                    )
                })
                .collect();
            let keep = std::env::temp_dir().join(format!("chaos-long-job-{id}.out"));
            let _ = std::fs::write(&keep, &text);
            let breaks: Vec<String> = (0..ranks)
                .flat_map(|r| {
                    seen[r]
                        .windows(2)
                        .filter(|w| w[1] != w[0] + 1)
                        .map(move |w| format!("rank {r}: {} then {}", w[0], w[1]))
                })
                .take(8)
                .collect();
            eprintln!(
                "long job {id}: its output is not whole: {}; out of order: {breaks:?}; kept in {}",
                summary.join("; "),
                keep.display()
            );
        }
    }
    let mut short_lost = 0;
    for &id in &acked {
        let done = state_of(&rt, &socket, id).is_some_and(|j| j.state() == v1::JobState::Completed);
        if !done {
            short_lost += 1;
        }
    }
    let (s50, s99) = median_p99(&mut serving_ms);
    let (u50, u99) = median_p99(&mut all_up_ms);
    println!(
        "{}",
        serde_json::json!({
            "bench": "chaos",
            "rounds": rounds,
            "kinds": kinds,
            "pause_s": pause.as_secs(),
            "long_pause_s": long_pause.as_secs(),
            "outage_s": outage.as_secs(),
            "serving_again_ms": {"median": s50, "p99": s99},
            "every_agent_back_ms": {"median": u50, "p99": u99},
            "long_jobs_running_after_each_round": running_after,
            "long_jobs": long_jobs.len(),
            "long_jobs_lost": lost_long,
            "long_jobs_ended_whole": whole,
            "short_jobs_acknowledged": acked.len(),
            "short_jobs_lost": short_lost,
        })
    );
    for (m, ..) in masters.iter_mut() {
        m.kill();
    }
    drop(c);
}
