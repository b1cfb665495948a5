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

// The crate root is this file, so its modules would sit beside it among the other benches.
#[path = "chaos/output.rs"]
mod output;
use output::output_whole;

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

/// A master kept by its unit, the socket it serves on, and the agent port it listens on.
type Master = (Standby, PathBuf, std::net::SocketAddr);

fn sockets(ms: &[Master]) -> Vec<PathBuf> {
    ms.iter().map(|m| m.1.clone()).collect()
}

fn leading(rt: &tokio::runtime::Runtime, ms: &[Master]) -> usize {
    leader(rt, &sockets(ms)).expect("a leader")
}

/// The bench's settings from the environment.
struct Settings {
    rounds: usize,
    pause: Duration,
    long_pause: Duration,
    outage: Duration,
    kinds: Vec<&'static str>,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            rounds: env_or("ROUNDS", 10),
            pause: Duration::from_secs(env_or("PAUSE_S", 3)),
            long_pause: Duration::from_secs(env_or("LONG_PAUSE_S", 12)),
            outage: Duration::from_secs(env_or("OUTAGE_S", 10)),
            kinds: chosen_kinds(),
        }
    }
}

/// KINDS (comma-separated) runs only those, in turn: to look at one kind of moment.
fn chosen_kinds() -> Vec<&'static str> {
    let all_kinds = ["failover", "pause", "long_pause", "outage"];
    let chosen = std::env::var("KINDS").unwrap_or_default();
    if chosen.is_empty() {
        return all_kinds.to_vec();
    }
    chosen
        .split(',')
        .map(|k| {
            *all_kinds
                .iter()
                .find(|a| **a == k.trim())
                .unwrap_or_else(|| panic!("KINDS: {k:?} is none of {all_kinds:?}"))
        })
        .collect()
}

/// The 2x2 cluster on etcd, its output under `out`, a standby's agent port ready.
fn start_cluster(
    bins: PathBuf,
    etcd: &EtcdCluster,
    out: &std::path::Path,
    b_agents: std::net::SocketAddr,
) -> LocalCluster {
    LocalCluster::start(
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
    .expect("a cluster on etcd")
}

/// Every master is kept by its unit (started again when it steps down): the cluster's
/// own, which nothing would restart, hands over to the second at once (a clean stop
/// gives its lease up) and is replaced by one that is kept. Returns once the second
/// leads with every agent.
fn kept_masters(
    rt: &tokio::runtime::Runtime,
    c: &mut LocalCluster,
    dir: &std::path::Path,
    b_agents: std::net::SocketAddr,
) -> Vec<Master> {
    let a_agents = c.agents_addr().unwrap();
    let second = standby(c, dir, "m1", b_agents);
    wait_file(&dir.join("m1.log"), Duration::from_secs(60));
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
    let first = standby(c, dir, "m0", a_agents);
    let mut masters: Vec<Master> = vec![];
    for (s, a) in [(second, b_agents), (first, a_agents)] {
        let sock = s.socket.clone();
        masters.push((s, sock, a));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = leader(rt, &sockets(&masters));
        if l.is_some_and(|l| nodes_up(rt, &masters[l].1) == 4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second master did not take over with every agent (leader {l:?}): {}",
            std::fs::read_to_string(&masters[0].0.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    masters
}

/// Short jobs, through whichever leads, all along: a thread submitting a 1x1 job every
/// 2 s to the masters' sockets of the moment (`current`: one that comes back has another)
/// until `stop`; it returns the ids acknowledged.
fn short_jobs(
    stop: Arc<AtomicBool>,
    current: Arc<std::sync::Mutex<Vec<PathBuf>>>,
) -> std::thread::JoinHandle<Vec<u64>> {
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
}

/// The cluster and its masters as the rounds disturb them.
struct Chaos<'a> {
    rt: &'a tokio::runtime::Runtime,
    c: &'a LocalCluster,
    dir: &'a std::path::Path,
    masters: Vec<Master>,
    /// The next master's name number.
    n: usize,
}

impl Chaos<'_> {
    /// A master kept by its unit, named `m<n>`, on agent port `agents`.
    fn start_master(&mut self, agents: std::net::SocketAddr) {
        let s = standby(self.c, self.dir, &format!("m{}", self.n), agents);
        self.n += 1;
        let sock = s.socket.clone();
        self.masters.push((s, sock, agents));
    }

    /// The bad moment `kind` to the leader `l` (or both masters). A pause runs beside the
    /// measure: it ends SIGCONT after its time, while clients look for a master that
    /// serves (for a long pause, the other one); its thread is returned.
    fn disturb(
        &mut self,
        l: usize,
        kind: &str,
        set: &Settings,
    ) -> Option<std::thread::JoinHandle<()>> {
        match kind {
            "pause" | "long_pause" => {
                let d = if kind == "pause" {
                    set.pause
                } else {
                    set.long_pause
                };
                let pid = self.masters[l].0.child.pid().expect("the leader runs");
                kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
                return Some(std::thread::spawn(move || {
                    std::thread::sleep(d);
                    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
                }));
            }
            "failover" => {
                let (mut m, _, agents) = self.masters.remove(l);
                m.kill();
                // The killed one comes back as the standby.
                self.start_master(agents);
            }
            _ => {
                // No master at all for a while: both killed, then both started again.
                let mut agents = vec![];
                for (mut m, _, a) in self.masters.drain(..) {
                    m.kill();
                    agents.push(a);
                }
                std::thread::sleep(set.outage);
                for a in agents {
                    self.start_master(a);
                }
            }
        }
        None
    }

    /// After a bad moment that began at `t`: the milliseconds until a master serves, and
    /// until every agent is back, and the leader then.
    fn serving_again(&self, t: Instant, round: usize, kind: &str) -> (f64, f64, usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let l = loop {
            if let Some(l) = leader(self.rt, &sockets(&self.masters)) {
                break l;
            }
            assert!(
                Instant::now() < deadline,
                "round {round} ({kind}): no master serves"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let serving = t.elapsed().as_secs_f64() * 1e3;
        while nodes_up(self.rt, &self.masters[l].1) < 4 {
            assert!(
                Instant::now() < deadline,
                "round {round} ({kind}): agents not back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        (serving, t.elapsed().as_secs_f64() * 1e3, l)
    }
}

/// How a long job ended.
enum LongEnd {
    /// Not completed with exit 0.
    Lost,
    /// Completed, every line of every rank once.
    Whole,
    /// Completed, but its output is not whole.
    Broken,
}

/// Waits for long job `id` to end and checks it and its output.
fn long_job_end(
    rt: &tokio::runtime::Runtime,
    socket: &std::path::Path,
    id: u64,
    deadline: Instant,
) -> LongEnd {
    let j = loop {
        let j = state_of(rt, socket, id);
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
        eprintln!("long job {id} ended {:?}: {}", j.state(), j.reason);
        return LongEnd::Lost;
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
    if output_whole(id, &text, (j.w * j.h) as usize) {
        LongEnd::Whole
    } else {
        LongEnd::Broken
    }
}

/// The rounds' measures.
#[derive(Default)]
struct Measures {
    serving_ms: Vec<f64>,
    all_up_ms: Vec<f64>,
    running_after: Vec<usize>,
}

/// ROUNDS bad moments in turn, each measured: serving again, every agent back, and how
/// many long jobs still run.
fn rounds(
    ch: &mut Chaos,
    set: &Settings,
    long_jobs: &[u64],
    current: &std::sync::Mutex<Vec<PathBuf>>,
) -> Measures {
    let mut m = Measures::default();
    for round in 0..set.rounds {
        let kind = set.kinds[round % set.kinds.len()];
        let l = leading(ch.rt, &ch.masters);
        let t = Instant::now();
        let paused = ch.disturb(l, kind, set);
        *current.lock().unwrap() = sockets(&ch.masters);
        let (serving, all_up, l) = ch.serving_again(t, round, kind);
        m.serving_ms.push(serving);
        m.all_up_ms.push(all_up);
        if let Some(p) = paused {
            p.join().unwrap();
        }
        let running = long_jobs
            .iter()
            .filter(|&&id| {
                state_of(ch.rt, &ch.masters[l].1, id)
                    .is_some_and(|j| j.state() == v1::JobState::Running)
            })
            .count();
        m.running_after.push(running);
        eprintln!(
            "round {round} ({kind}): serving after {:.0} ms, every agent after {:.0} ms, {running} of 3 long jobs running",
            m.serving_ms[round], m.all_up_ms[round]
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    m
}

fn main() {
    let set = Settings::from_env();
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl"]);
    let etcd = EtcdCluster::start(3).expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    let b_agents = free_port();
    let mut c = start_cluster(bins, &etcd, &dir.path().join("output"), b_agents);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let masters = kept_masters(&rt, &mut c, dir.path(), b_agents);
    let released = dir.path().join("release");
    // Each line names its rank: `R I`, then `R done N`.
    let long = format!(
        "i=0; while [ ! -e {r} ]; do i=$((i+1)); echo $GANG_RANK $i; sleep 0.25; done; echo $GANG_RANK done $i",
        r = released.display()
    );
    let l0 = leading(&rt, &masters);
    let long_jobs: Vec<u64> = ["2x2", "2x1", "2x1"]
        .iter()
        .map(|shape| submit(&rt, &masters[l0].1, &["sh", "-c", &long], shape).expect("a long job"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let current = Arc::new(std::sync::Mutex::new(sockets(&masters)));
    let shorts = short_jobs(stop.clone(), current.clone());
    std::thread::sleep(Duration::from_secs(5));
    let mut ch = Chaos {
        rt: &rt,
        c: &c,
        dir: dir.path(),
        masters,
        n: 2,
    };
    let mut m = rounds(&mut ch, &set, &long_jobs, &current);
    let mut masters = ch.masters;
    stop.store(true, Ordering::Relaxed);
    let acked = shorts.join().unwrap();
    std::fs::write(&released, b"").unwrap();
    let socket = masters[leading(&rt, &masters)].1.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut lost_long, mut whole) = (0, 0);
    for &id in &long_jobs {
        match long_job_end(&rt, &socket, id, deadline) {
            LongEnd::Lost => lost_long += 1,
            LongEnd::Whole => whole += 1,
            LongEnd::Broken => {}
        }
    }
    let mut short_lost = 0;
    for &id in &acked {
        let done = state_of(&rt, &socket, id).is_some_and(|j| j.state() == v1::JobState::Completed);
        if !done {
            short_lost += 1;
        }
    }
    let (s50, s99) = median_p99(&mut m.serving_ms);
    let (u50, u99) = median_p99(&mut m.all_up_ms);
    println!(
        "{}",
        serde_json::json!({
            "bench": "chaos",
            "rounds": set.rounds,
            "kinds": set.kinds,
            "pause_s": set.pause.as_secs(),
            "long_pause_s": set.long_pause.as_secs(),
            "outage_s": set.outage.as_secs(),
            "serving_again_ms": {"median": s50, "p99": s99},
            "every_agent_back_ms": {"median": u50, "p99": u99},
            "long_jobs_running_after_each_round": m.running_after,
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
