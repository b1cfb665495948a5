//! Recovery time after a master crash on a real 4x4 loopback cluster (release binaries),
//! MPL 4, with 16 running 1x1 jobs (`sleep`) and 1,000 queued 4x4 jobs.
//!
//! The queue has to stay a queue: a slice with any home job left takes no 4x4 job, so the
//! 16 1x1 jobs are spread four to a slice over all four slices (each slice first mostly
//! filled by a 4x3 blocker, cancelled afterwards), and every 4x4 job waits.
//!
//! Each round SIGKILLs the master and spawns a new one on the same state; a poller on the
//! master's socket (every 2 ms) records, from the spawn, when the master first answers
//! `ListNodes`, when it lists every job back in its state (16 running, 1,000 queued), and
//! when it also lists every node up (every agent registered again, reporting its ranks,
//! so the running jobs are adopted).
//!
//! Prints JSON. Env: RESTARTS (default 50), QUEUED (default 1000).

use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, release_bins};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, MasterChannel, Target};
use gang_proto::v1;
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::Signal;

const RUNNING: usize = 16;

fn spec(shape: &str, argv: &[&str]) -> v1::JobSpec {
    v1::JobSpec {
        shape: shape.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: "/".into(),
        ..Default::default()
    }
}

async fn submit(c: &mut JobServiceClient<MasterChannel>, shape: &str, argv: &[&str]) -> u64 {
    c.submit(v1::SubmitRequest {
        spec: Some(spec(shape, argv)),
        ..Default::default()
    })
    .await
    .expect("submitted")
    .into_inner()
    .job
    .expect("a job in the answer")
    .id
}

async fn jobs_in(c: &mut JobServiceClient<MasterChannel>) -> Vec<v1::JobInfo> {
    gang_cli::jobs::listing::list(c, &[], 0)
        .await
        .expect("ListJobs")
}

fn count(jobs: &[v1::JobInfo], state: v1::JobState) -> usize {
    jobs.iter().filter(|j| j.state() == state).count()
}

/// Poll until `ok` holds for the jobs listed.
async fn wait_jobs(
    c: &mut JobServiceClient<MasterChannel>,
    what: &str,
    ok: impl Fn(&[v1::JobInfo]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if ok(&jobs_in(c).await) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The 16 running 1x1 jobs, four in each of the four slices, and `queued` 4x4 jobs.
async fn load(c: &mut JobServiceClient<MasterChannel>, queued: usize) {
    let mut blockers = Vec::new();
    for slice in 0..4 {
        // Fills all of a new slice but 4 nodes (the slices before are full): the next
        // four 1x1 jobs land on those.
        blockers.push(submit(c, "4x3", &["sleep", "3600"]).await);
        for _ in 0..4 {
            submit(c, "1x1", &["sleep", "3600"]).await;
        }
        let want = (slice + 1) * 5;
        wait_jobs(c, "the jobs of a slice to run", |j| {
            count(j, v1::JobState::Running) == want
        })
        .await;
    }
    for id in blockers {
        c.cancel(v1::CancelRequest { job_id: id, uid: 0 })
            .await
            .expect("blocker cancelled");
    }
    wait_jobs(c, "the blockers to end", |j| {
        count(j, v1::JobState::Cancelled) == 4 && count(j, v1::JobState::Running) == RUNNING
    })
    .await;
    for _ in 0..queued {
        submit(c, "4x4", &["true"]).await;
    }
    let jobs = jobs_in(c).await;
    assert_eq!(count(&jobs, v1::JobState::Running), RUNNING, "running");
    assert_eq!(count(&jobs, v1::JobState::Queued), queued, "queued");
    assert!(
        jobs.iter()
            .filter(|j| j.state() == v1::JobState::Running)
            .all(|j| (j.w, j.h) == (1, 1)),
        "only the 1x1 jobs run"
    );
}

/// What one restart took, from the new master's spawn.
struct Round {
    first_answer: Duration,
    /// Every job listed in its state (recovered from the database).
    jobs_back: Duration,
    /// That, and every node up.
    recovered: Duration,
}

/// Poll the master's socket from `t0` until it lists every node up and every job back.
fn poll_recovery(addr: String, t0: Instant, queued: usize) -> Round {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            let deadline = t0 + Duration::from_secs(60);
            let target = Target::parse(&addr).unwrap();
            let mut first_answer = None;
            let mut jobs_back = None;
            let mut ch: Option<MasterChannel> = None;
            loop {
                assert!(
                    Instant::now() < deadline,
                    "the master did not recover in 60 s"
                );
                if ch.is_none() {
                    ch = client::connect(&target, &Default::default(), Duration::from_secs(1))
                        .await
                        .ok();
                }
                let Some(channel) = ch.clone() else {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                };
                let nodes = AdminServiceClient::new(channel.clone())
                    .list_nodes(v1::ListNodesRequest {})
                    .await;
                let Ok(nodes) = nodes else {
                    // The old master's socket, or a connection that broke: dial again.
                    ch = None;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                };
                first_answer.get_or_insert_with(|| t0.elapsed());
                let nodes = nodes.into_inner().nodes;
                let up = nodes.len() == 16 && nodes.iter().all(|n| n.state() == v1::NodeState::Up);
                if jobs_back.is_none() || up {
                    let jobs = jobs_in(&mut JobServiceClient::new(channel)).await;
                    let back = count(&jobs, v1::JobState::Running) == RUNNING
                        && count(&jobs, v1::JobState::Queued) == queued;
                    if back {
                        jobs_back.get_or_insert_with(|| t0.elapsed());
                        if up {
                            return Round {
                                first_answer: first_answer.unwrap(),
                                jobs_back: jobs_back.unwrap(),
                                recovered: t0.elapsed(),
                            };
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
}

fn ms(xs: &mut [f64]) -> serde_json::Value {
    let (median, p99) = median_p99(xs);
    serde_json::json!({"median_ms": median, "p99_ms": p99, "min_ms": xs[0], "max_ms": xs[xs.len() - 1]})
}

fn main() {
    let restarts: usize = env_or("RESTARTS", 50);
    let queued: usize = env_or("QUEUED", 1000);
    let bins = release_bins();
    let opts = LocalClusterOptions {
        bin_dir: Some(bins),
        mpl: Some(4),
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    let mut c = LocalCluster::start((4, 4), opts).expect("cluster");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut jobs = JobServiceClient::new(c.channel().await.unwrap());
        load(&mut jobs, queued).await;
    });

    let mut ready = Vec::new();
    let mut first_answer = Vec::new();
    let mut jobs_back = Vec::new();
    let mut recovered = Vec::new();
    for _ in 0..restarts {
        c.stop_master(Signal::SIGKILL).expect("master killed");
        let addr = c.master_addr().to_string();
        let t0 = Instant::now();
        let poller = std::thread::spawn(move || poll_recovery(addr, t0, queued));
        c.start_master().expect("master restarted");
        ready.push(t0.elapsed().as_secs_f64() * 1e3);
        let round = poller.join().expect("the poller does not panic");
        first_answer.push(round.first_answer.as_secs_f64() * 1e3);
        jobs_back.push(round.jobs_back.as_secs_f64() * 1e3);
        recovered.push(round.recovered.as_secs_f64() * 1e3);
    }
    c.shutdown().unwrap();
    let out = serde_json::json!({
        "bench": "recovery", "mesh": "4x4", "mpl": 4,
        "running_jobs": RUNNING, "queued_jobs": queued, "restarts": restarts,
        "kill": "SIGKILL, then a new master spawned on the same state",
        "spawn_to_ready_file": ms(&mut ready),
        "spawn_to_first_list_nodes_answer": ms(&mut first_answer),
        "spawn_to_all_jobs_listed_back": ms(&mut jobs_back),
        "spawn_to_all_nodes_up_and_all_jobs_back": ms(&mut recovered),
        "note": "ready file: as LocalCluster sees it (polled every 25 ms); the others polled every 2 ms on the master's socket; nodes come up as agents register again, which they do at their next heartbeat (500 ms period by default), answered 'unknown node' by the new master"
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
