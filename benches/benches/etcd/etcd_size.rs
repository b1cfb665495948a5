//! The size of a cluster's history in etcd: JOBS finished jobs (default 1,000,000) saved
//! through the master's etcd store as its rounds save them (100 to a transaction, each row
//! a realistic finished 2x2 job), on a real 3-member etcd on loopback. Ended jobs are
//! archived a thousand to a key as they go (`etcd_archive`); at the end the history is
//! compacted and every member defragmented, and each member's database size is read.
//! Before that, a master is elected on it without a warm copy (it reads it all), and the
//! real master daemon is started on it: cold, then `ROUNDS` standbys that followed the
//! state take over from a leader killed with kill -9.
//!
//! Prints JSON: the time it took, the takeover's read, the keys left, the rows' own bytes,
//! and each member's database size (total, and in use) after compaction and
//! defragmentation.

use std::time::{Duration, Instant};

use std::path::PathBuf;

use gang_benches::{env_or, median_p99, release_bins};
use gang_e2e::etcd_cluster::{EtcdCluster, free_port};
use gang_e2e::failover::{Standby, standby, wait_file};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_master::state::effects::Save;
use gang_master::state::round::Commit;
use nix::sys::signal::Signal;

fn release_leader(rt: &tokio::runtime::Runtime, etcd: &EtcdCluster) {
    rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(60)).unwrap();
        e.txn(gang_etcd::pb::etcdserverpb::TxnRequest {
            success: vec![gang_etcd::delete_op(b"/bench/size/leader".to_vec())],
            ..Default::default()
        })
        .await
        .expect("the leader key removed");
    });
}

/// The `ms=` of the log line that says the state is ready (how long the elected master
/// took to have it, from its election).
fn state_ready_ms(log: &std::path::Path) -> Option<f64> {
    let text = gang_e2e::without_colours(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().rev().find(|l| l.contains("state ready"))?;
    let rest = &line[line.find(" ms=")? + 4..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Seconds since midnight (UTC) of a log line's timestamp (`2026-11-27T20:07:22.978791Z`).
fn log_seconds(line: &str) -> Option<f64> {
    let t = line.split_once('T')?.1.split('Z').next()?;
    let mut parts = t.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Where a takeover's time went, from the kill (wall clock) through the new leader's log:
/// milliseconds from the kill to each step.
fn phases(log: &std::path::Path, killed: std::time::SystemTime) -> Vec<(&'static str, f64)> {
    let text = gang_e2e::without_colours(&std::fs::read_to_string(log).unwrap_or_default());
    let since = killed.duration_since(std::time::UNIX_EPOCH).unwrap();
    let kill_s = (since.as_secs() % 86_400) as f64 + f64::from(since.subsec_nanos()) / 1e9;
    [
        ("elected", "elected leader"),
        ("state_ready", "state ready"),
        ("recovered", "state recovered"),
        ("serving", "master serving"),
    ]
    .into_iter()
    .filter_map(|(name, needle)| {
        let line = text.lines().rev().find(|l| l.contains(needle))?;
        Some((name, (log_seconds(line)? - kill_s) * 1e3))
    })
    .collect()
}

/// The real master daemon on this history: a cold start (the whole read, then recovery),
/// then `rounds` times a standby that followed the state is started, its copy awaited, and
/// the leader killed (kill -9): how long until the standby serves.
fn masters_on_history(etcd: &EtcdCluster, rounds: usize) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<std::net::SocketAddr> = (0..rounds).map(|_| free_port()).collect();
    let master_args = [
        "--etcd-trusted-network",
        "--etcd-lease-s",
        "1",
        "--output-dir",
        &dir.path().join("out").display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let bins = release_bins();
    let t = Instant::now();
    let mut c = LocalCluster::start(
        (2, 2),
        LocalClusterOptions {
            bin_dir: Some(bins),
            state: Some(PathBuf::from(etcd.url("bench/size"))),
            master_args,
            standby_agent_ports: ports.clone(),
            master_ready_timeout: Duration::from_secs(600),
            ..LocalClusterOptions::default()
        },
    )
    .expect("a cluster on the history");
    let cold = t.elapsed().as_secs_f64();
    eprintln!("cluster started on the history in {cold:.1} s");
    let (mut warm, mut serving, mut handover) = (vec![], vec![], vec![]);
    let mut timelines = vec![];
    let mut leader: Option<Standby> = None;
    for (i, port) in ports.into_iter().enumerate() {
        let next = standby(&c, dir.path(), &format!("m{i}"), port);
        warm.push(next.wait_warm(Duration::from_secs(600)).as_secs_f64());
        match leader.take() {
            None => drop(c.stop_master(Signal::SIGKILL).unwrap()),
            Some(mut l) => l.kill(),
        }
        let (t, killed) = (Instant::now(), std::time::SystemTime::now());
        wait_file(&next.ready, Duration::from_secs(120));
        serving.push(t.elapsed().as_secs_f64() * 1e3);
        handover.push(state_ready_ms(&next.log).unwrap_or(f64::NAN));
        let steps = phases(&next.log, killed);
        eprintln!("  from the kill (ms): {steps:?}");
        timelines.push(serde_json::json!(
            steps
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::json!(v.round())))
                .collect::<serde_json::Map<_, _>>()
        ));
        eprintln!(
            "round {}: copy warm after {:.1} s; kill -9 to serving {:.0} ms (state ready {:.0} ms after the election)",
            i + 1,
            warm[i],
            serving[i],
            handover[i]
        );
        leader = Some(next);
    }
    if let Some(mut l) = leader {
        l.kill();
    }
    let (s50, s99) = median_p99(&mut serving);
    let (h50, h99) = median_p99(&mut handover);
    serde_json::json!({
        "cluster_cold_start_seconds": cold,
        "standby_copy_ready_seconds": warm,
        "failover_kill_to_serving_ms": {"median": s50, "p99": s99, "rounds": serving},
        "state_ready_after_election_ms": {"median": h50, "p99": h99},
        "from_the_kill_ms": timelines,
        "lease_s": 1,
    })
}

fn main() {
    let jobs: u64 = env_or("JOBS", 1_000_000);
    let etcd = EtcdCluster::start(3).expect("etcd");
    let target: gang_etcd::Target = etcd.url("bench/size").parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut store, _) = rt
        .block_on(gang_master::persistence::etcd::EtcdStore::open(
            &target,
            "bench".into(),
            2,
            Duration::from_secs(10),
            |_| {},
        ))
        .expect("leads");
    let t0 = Instant::now();
    let mut raw = 0usize;
    let mut id = 1;
    while id <= jobs {
        let end = (id + 100).min(jobs + 1);
        let saves: Vec<Save> = (id..end)
            .map(|i| {
                let r = gang_e2e::failover::saved_job(i, "completed");
                raw += serde_json::to_vec(&r).unwrap().len();
                Save::Job(Box::new(r))
            })
            .collect();
        rt.block_on(async {
            tokio::task::block_in_place(|| store.commit(saves.iter())).expect("committed")
        });
        id = end;
        if id % 100_000 == 1 {
            eprintln!("{} jobs in {:.0} s", id - 1, t0.elapsed().as_secs_f64());
        }
    }
    let written = t0.elapsed();
    drop(store);
    // What a master elected on this store reads when it kept no warm copy: all of it. The
    // first leader's key is removed so that the second leads at once.
    release_leader(&rt, &etcd);
    let takeover = rt.block_on(async {
        let t = Instant::now();
        let (_store, loaded) = gang_master::persistence::etcd::EtcdStore::open(
            &target,
            "bench-2".into(),
            2,
            Duration::from_secs(60),
            |_| {},
        )
        .await
        .expect("the second master leads");
        assert_eq!(loaded.jobs.len() as u64, jobs);
        t.elapsed()
    });
    release_leader(&rt, &etcd);
    let masters = masters_on_history(&etcd, env_or("ROUNDS", 3));
    eprintln!("takeover read {jobs} jobs in {takeover:?}");
    let out = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(60)).unwrap();
        let rev = e.status().await.unwrap().header.map_or(0, |h| h.revision);
        // The store compacts every 1000 commits: the newest revision may be compacted already.
        if let Err(err) = e.compact(rev).await
            && !err.to_string().contains("compacted")
        {
            panic!("compaction: {err}");
        }
        let archives = e.get_prefix(b"/bench/size/archive/", 100).await.unwrap().len();
        let left = e.get_prefix(b"/bench/size/jobs/", 1000).await.unwrap().len();
        let sizes: Vec<serde_json::Value> = e
            .defragment_each()
            .await
            .unwrap()
            .into_iter()
            .map(|(m, st)| serde_json::json!({"member": m, "db_size_bytes": st.db_size, "db_size_in_use_bytes": st.db_size_in_use}))
            .collect();
        serde_json::json!({
            "jobs": jobs,
            "write_seconds": written.as_secs_f64(),
            "takeover_read_seconds": takeover.as_secs_f64(),
            "master_daemons": masters,
            "jobs_per_second": jobs as f64 / written.as_secs_f64(),
            "rows_json_bytes": raw,
            "archive_keys": archives,
            "job_keys_left": left,
            "members_after_compaction_and_defrag": sizes,
        })
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
