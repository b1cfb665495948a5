//! Masters on etcd killed one after another under submissions: shared by the test that
//! CI runs (`tests/etcd.rs`) and the bench that measures it (`benches/etcd_failover`).
//! Each kill's standby is the next leader; the killed master comes back as the next
//! standby, on the same agent port (the agents know a fixed list of masters).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gang_local::unit::Unit;
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::Signal;

use crate::etcd_cluster::free_port;

pub struct Standby {
    pub child: Unit,
    pub agents: std::net::SocketAddr,
    pub socket: PathBuf,
    pub ready: PathBuf,
    pub log: PathBuf,
}

impl Standby {
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Wait until it has read the state and follows its changes (its warm copy is there):
    /// how long that took.
    pub fn wait_warm(&self, within: Duration) -> Duration {
        let t = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("warm copy: state read") {
                return t.elapsed();
            }
            assert!(
                t.elapsed() < within,
                "the standby has no warm copy after {within:?}: {log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A standby master of `c` on a fresh port, its files in `dir` named after `name`.
pub fn standby(c: &LocalCluster, dir: &Path, name: &str, agents: std::net::SocketAddr) -> Standby {
    let socket = dir.join(format!("{name}.sock"));
    let ready = dir.join(format!("{name}.ready"));
    let log = dir.join(format!("{name}.log"));
    let child = c
        .standby_master(free_port(), agents, &socket, &ready, &log)
        .expect("a standby master");
    Standby {
        child,
        agents,
        socket,
        ready,
        log,
    }
}

/// Wait until `p` exists: how long that took.
pub fn wait_file(p: &Path, within: Duration) -> Duration {
    let t = Instant::now();
    while !p.exists() {
        assert!(t.elapsed() < within, "{} did not appear", p.display());
        std::thread::sleep(Duration::from_millis(2));
    }
    t.elapsed()
}

/// A job client of the first of `sockets` that answers.
pub async fn any_master(sockets: &[PathBuf]) -> Option<JobServiceClient<client::MasterChannel>> {
    for s in sockets {
        let target = Target::parse(&format!("unix:{}", s.display())).ok()?;
        if let Ok(ch) = client::connect_with_request_timeout(
            &target,
            &Default::default(),
            Duration::from_millis(500),
            Some(Duration::from_secs(5)),
        )
        .await
        {
            return Some(JobServiceClient::new(ch));
        }
    }
    None
}

/// A held 1x1 job (it waits for a release: submissions measure the master and its store,
/// not launches), with the retry token `token` if not empty.
pub fn held_job(token: &str) -> v1::SubmitRequest {
    v1::SubmitRequest {
        spec: Some(v1::JobSpec {
            shape: "1x1".into(),
            argv: vec!["true".into()],
            cwd: "/".into(),
            hold: true,
            ..Default::default()
        }),
        client_token: token.into(),
        ..Default::default()
    }
}

/// How long one submission may go unacknowledged through kills before the test fails:
/// a failover takes seconds; this is a master that never came.
const NO_MASTER_FOR: Duration = Duration::from_secs(120);

/// One client's submissions, each retried (same token) until a master acknowledges it:
/// the ids acknowledged; an error naming the submission no master took within
/// `NO_MASTER_FOR`.
async fn submit_through(
    sockets: Vec<PathBuf>,
    n: usize,
    tag: String,
    acked: Arc<AtomicUsize>,
) -> Result<Vec<u64>, String> {
    let mut ids = Vec::with_capacity(n);
    let mut client = None;
    for i in 0..n {
        let token = format!("{tag}-{i}");
        let since = Instant::now();
        loop {
            if since.elapsed() > NO_MASTER_FOR {
                return Err(format!(
                    "no master of {sockets:?} acknowledged submission {token} within {NO_MASTER_FOR:?}"
                ));
            }
            if client.is_none() {
                client = any_master(&sockets).await;
            }
            let Some(c) = client.as_mut() else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            match c.submit(held_job(&token)).await {
                Ok(r) => {
                    ids.push(r.into_inner().job.expect("a job").id);
                    acked.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(_) => {
                    client = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    Ok(ids)
}

/// When process `pid` started (clock ticks since boot): another process given the same
/// pid later has another.
fn start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 2..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// What came through the kills.
#[derive(Debug, Default)]
pub struct KillsOutcome {
    pub kills: usize,
    pub clients: usize,
    pub per_client: usize,
    pub acknowledged: usize,
    /// Acknowledged, then not in the next leader's list.
    pub lost: usize,
    /// Acknowledged twice, or listed beyond what was acknowledged.
    pub doubled: usize,
    /// The job that ran through every kill: still running, its rank never restarted.
    pub running_undisturbed: bool,
    pub kill_to_serving_ms: Vec<f64>,
}

impl KillsOutcome {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "kills": self.kills,
            "clients": self.clients,
            "submissions_per_client_per_kill": self.per_client,
            "acknowledged": self.acknowledged,
            "lost": self.lost,
            "doubled": self.doubled,
            "running_job_undisturbed": self.running_undisturbed,
        })
    }
}

/// `kills` rounds of 4 clients x `per_client` held submissions with the leader SIGKILLed
/// once half of them are acknowledged, a 1x1 job running throughout. `opts` is a 2x2
/// cluster's, its state in etcd (its standby agent port is set here).
pub fn kills_under_submissions(
    rt: &tokio::runtime::Runtime,
    mut opts: LocalClusterOptions,
    kills: usize,
    per_client: usize,
) -> KillsOutcome {
    const CLIENTS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let b_agents = free_port();
    opts.standby_agent_ports = vec![b_agents];
    let mut c = cluster_holding_every_job(opts, dir.path());
    let a_agents = c.agents_addr().unwrap();
    let a_socket = PathBuf::from(c.master_addr().trim_start_matches("unix:"));
    let busy_dir = dir.path().join("busy");
    std::fs::create_dir_all(&busy_dir).unwrap();
    let running = crate::submit(&c, "1x1", &["sh", "-c", &crate::busy_script(&busy_dir)]);
    let pid = crate::rank_pids(&busy_dir, 1, Duration::from_secs(60))[0];
    let started = start_time(pid).expect("the running rank");

    let spawn =
        |c: &LocalCluster, n: usize, agents| standby(c, dir.path(), &format!("k{n}"), agents);
    let mut next = spawn(&c, 0, b_agents);
    let mut leader: Option<Standby> = None;
    let mut sockets = vec![a_socket, next.socket.clone()];
    let mut out = KillsOutcome {
        kills,
        clients: CLIENTS,
        per_client,
        ..Default::default()
    };
    let mut before = 0usize;
    for round in 0..kills {
        crate::wait_for(Duration::from_secs(60), "the standby to stand by", || {
            std::fs::read_to_string(&next.log)
                .unwrap_or_default()
                .contains("standing by")
                .then_some(())
        });
        let acked = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let tasks = spawn_clients(rt, &sockets, CLIENTS, per_client, round, &acked);
        let half = CLIENTS * per_client / 2;
        wait_acknowledged(&acked, half, round);
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
        let serving = wait_file(&next.ready, Duration::from_secs(60));
        out.kill_to_serving_ms.push(serving.as_secs_f64() * 1e3);
        let mut ids = acknowledged_ids(rt, tasks, &acked);
        let submitted = t0.elapsed();
        out.acknowledged += ids.len();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        out.doubled += n - ids.len();
        let listed = listed_ids(rt, &next.socket, running);
        out.lost += ids.iter().filter(|id| !listed.contains(id)).count();
        // Jobs beyond those acknowledged (a retry that made a second job) are doubles too.
        out.doubled += listed.len().saturating_sub(before + ids.len());
        before = listed.len();
        eprintln!(
            "kill {}: {} acknowledged in {submitted:?}, {} listed, serving after {serving:?}",
            round + 1,
            ids.len(),
            listed.len(),
        );
        let standby = spawn(&c, round + 1, killed_agents);
        sockets = vec![next.socket.clone(), standby.socket.clone()];
        leader = Some(std::mem::replace(&mut next, standby));
    }
    // The job that ran through it all: the new leader says it runs, its rank is the one
    // started before the first kill.
    let lead = leader.as_ref().expect("a leader");
    out.running_undisturbed = start_time(pid) == Some(started) && runs(rt, &lead.socket, running);
    for s in [Some(next), leader].iter_mut().flatten() {
        s.kill();
    }
    out
}

/// A 2x2 cluster on etcd whose master keeps every job a user queues (more than one user
/// may have by default), so no submission of the test is refused.
fn cluster_holding_every_job(mut opts: LocalClusterOptions, dir: &Path) -> LocalCluster {
    let limits = dir.join("limits.toml");
    std::fs::write(&limits, "[limits]\nmax_queued_per_user = 1000000\n").unwrap();
    opts.master_args.push("--config".into());
    opts.master_args.push(limits.display().to_string());
    LocalCluster::start((2, 2), opts).expect("a cluster on etcd")
}

/// `clients` clients submitting `per_client` jobs each through whichever of `sockets`
/// answers, counting acknowledgements in `acked`.
fn spawn_clients(
    rt: &tokio::runtime::Runtime,
    sockets: &[PathBuf],
    clients: usize,
    per_client: usize,
    round: usize,
    acked: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Result<Vec<u64>, String>>> {
    (0..clients)
        .map(|k| {
            rt.spawn(submit_through(
                sockets.to_vec(),
                per_client,
                format!("r{round}c{k}"),
                acked.clone(),
            ))
        })
        .collect()
}

/// The ids the clients were told, once every client has finished its submissions. A
/// client that still gets acknowledgements is slow, not stuck (on a loaded host 4,000
/// submissions through five failovers take minutes): only `NO_MASTER_FOR` without a single
/// acknowledgement from any client fails the test. Each submission carries that deadline
/// of its own (`submit_through`), and each call its request timeout.
fn acknowledged_ids(
    rt: &tokio::runtime::Runtime,
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<u64>, String>>>,
    acked: &Arc<AtomicUsize>,
) -> Vec<u64> {
    rt.block_on(async {
        let mut all = vec![];
        let (mut seen, mut progress_at) = (acked.load(Ordering::Relaxed), Instant::now());
        for mut t in tasks {
            let done = loop {
                match tokio::time::timeout(Duration::from_secs(1), &mut t).await {
                    Ok(done) => break done,
                    Err(_) => {
                        let now = acked.load(Ordering::Relaxed);
                        if now != seen {
                            (seen, progress_at) = (now, Instant::now());
                        } else if progress_at.elapsed() > NO_MASTER_FOR {
                            panic!(
                                "no client was acknowledged for {NO_MASTER_FOR:?} ({now} acknowledged in all)"
                            );
                        }
                    }
                }
            };
            match done {
                Ok(Ok(mine)) => all.extend(mine),
                Ok(Err(why)) => panic!("{why}"),
                Err(e) => panic!("a client failed: {e}"),
            }
        }
        all
    })
}

/// Wait until `target` submissions of `round` are acknowledged. Slow is not stuck: a
/// loaded host with thousands of held jobs (debug builds check the whole state every
/// round) acknowledges slower each round, so this fails only after `NO_MASTER_FOR` with
/// no acknowledgement at all (under two CPU hogs round 3's first half took over 120 s
/// while every second brought more).
fn wait_acknowledged(acked: &AtomicUsize, target: usize, round: usize) {
    let (mut seen, mut progress_at) = (acked.load(Ordering::Relaxed), Instant::now());
    while seen < target {
        std::thread::sleep(Duration::from_millis(50));
        let now = acked.load(Ordering::Relaxed);
        if now != seen {
            (seen, progress_at) = (now, Instant::now());
        }
        assert!(
            progress_at.elapsed() <= NO_MASTER_FOR,
            "round {round}: no submission acknowledged for {NO_MASTER_FOR:?} \
             ({seen} of the {target} waited for)"
        );
    }
}

/// The jobs the master at `socket` lists, but the one running through it all.
fn listed_ids(rt: &tokio::runtime::Runtime, socket: &Path, running: u64) -> BTreeSet<u64> {
    rt.block_on(async {
        let mut cl = any_master(&[socket.to_path_buf()])
            .await
            .expect("the new leader answers");
        let jobs = gang_cli::jobs::listing::list(&mut cl, &[], 0)
            .await
            .expect("listed");
        jobs.iter()
            .filter(|j| j.id != running)
            .map(|j| j.id)
            .collect()
    })
}

/// Whether the master at `socket` says job `id` runs.
fn runs(rt: &tokio::runtime::Runtime, socket: &Path, id: u64) -> bool {
    rt.block_on(async {
        let mut cl = any_master(&[socket.to_path_buf()])
            .await
            .expect("the leader answers");
        cl.get_job(v1::GetJobRequest { job_id: id })
            .await
            .is_ok_and(|r| r.into_inner().state() == v1::JobState::Running)
    })
}

/// A job's row as the master saves it (numbered `id`, in `state`: "queued", "completed"...),
/// with the fields a finished 2x2 job of a real run has.
pub fn saved_job(id: u64, state: &str) -> gang_master::job::SavedJob {
    let text = format!(
        r#"{{"id":{id},"user":"u1000","uid":1000,"gid":1000,"groups":[1000],"name":"solver","argv":["./solver","--size","100","--out","run-{id}.h5"],"cwd":"/home/u1000/run","env":{{"PATH":"/usr/local/bin:/usr/bin:/bin","HOME":"/home/u1000","LANG":"C.UTF-8","OMP_NUM_THREADS":"1"}},"time_limit_s":3600,"stdin":false,"shape":"2x2","w":2,"h":2,"state":"{state}","submesh":{{"x":{x},"y":{y},"w":2,"h":2}},"exit_code":0,"reason":"","submit_ns":{s},"start_ns":{t},"end_ns":{e},"gang":"stop","on_deadlock":"report","msg_context":"resident","mpi":"auto","mpi_check":false,"run_ns":59900000000,"usage":{{"ranks_measured":4,"cpu_user_ns":239000000000,"cpu_system_ns":1200000000,"max_rss_bytes":734003200,"max_rss_rank":2}}}}"#,
        x = id % 14,
        y = (id / 14) % 14,
        s = 1_700_000_000_000_000_000u64 + id * 1_000_000,
        t = 1_700_000_000_100_000_000u64 + id * 1_000_000,
        e = 1_700_000_060_000_000_000u64 + id * 1_000_000,
    );
    serde_json::from_str(&text).expect("a job row")
}
