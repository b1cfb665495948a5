//! Faults on the real binaries: the master SIGKILLed while clients submit, an agent
//! SIGKILLed mid-job, the disk under the master's database full. Each test prints its
//! figures (`cargo test -p gang-e2e --test faults -- --nocapture`).
//!
//! One test at a time: CPU-bound ranks of two clusters would measure each other on 2
//! cores, and the process-tree checks look at every process below this one (this test
//! process is a child subreaper, so what a dead agent leaves behind is reparented to it
//! and found by walking ppid links in /proc, whatever its name).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, MasterChannel, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

const T: Duration = Duration::from_secs(30);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    static SUBREAPER: std::sync::Once = std::sync::Once::new();
    SUBREAPER.call_once(|| {
        nix::sys::prctl::set_child_subreaper(true).expect("become a child subreaper");
    });
    // A failed test must not fail the others: its cluster was torn down as it unwound.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

async fn connect(addr: &str) -> Option<JobServiceClient<MasterChannel>> {
    let target = Target::parse(addr).ok()?;
    let ch = client::connect(&target, &Default::default(), Duration::from_secs(2))
        .await
        .ok()?;
    Some(JobServiceClient::new(ch))
}

fn spec(shape: &str, argv: &[&str], name: &str, env: &[(&str, &str)]) -> v1::JobSpec {
    v1::JobSpec {
        shape: shape.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: "/".into(),
        name: name.into(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// Every job the master lists (all states, newest first).
async fn list_all(
    c: &mut JobServiceClient<MasterChannel>,
) -> Result<Vec<v1::JobInfo>, tonic::Status> {
    Ok(c.list_jobs(v1::ListJobsRequest {
        states: vec![],
        limit: 1_000_000,
    })
    .await?
    .into_inner()
    .jobs)
}

// ---------------------------------------------------------------- processes

/// A process below this one, from /proc.
#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    ppid: i32,
    state: char,
    cmdline: String,
}

impl Proc {
    fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    fn env(&self) -> Vec<String> {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .map(|b| {
                b.split(|&c| c == 0)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn all_procs() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        Some(Proc {
            pid,
            ppid,
            state,
            cmdline,
        })
    })
    .collect()
}

/// Every process below this one, by ppid links.
fn descendants() -> Vec<Proc> {
    let all = all_procs();
    let mut found: Vec<Proc> = Vec::new();
    let mut frontier = vec![std::process::id() as i32];
    while let Some(parent) = frontier.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                frontier.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

/// Reap orphans that were reparented to us and have exited; a cluster's own children
/// (`theirs`: `LocalCluster::pids`) are its to reap.
fn reap_orphans(theirs: &[u32]) {
    let me = std::process::id() as i32;
    for p in descendants() {
        if p.ppid == me && !p.alive() && !theirs.contains(&(p.pid as u32)) {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Live processes below us of job `id` of the cluster marked `mark`: ranks get
/// `GANG_JOB_ID` from their agent and the job's environment, and pass both on to what
/// they start.
fn job_procs(mark: &str, id: u64) -> Vec<Proc> {
    let want_mark = format!("FAULTS_MARK={mark}");
    let want_id = format!("GANG_JOB_ID={id}");
    descendants()
        .into_iter()
        .filter(Proc::alive)
        .filter(|p| {
            let env = p.env();
            env.contains(&want_mark) && env.contains(&want_id)
        })
        .collect()
}

// ---------------------------------------------------------------- time sharing

/// A CPU-bound 4x4 job; its ranks' pids.
struct Busy {
    id: u64,
    pids: Vec<i32>,
}

fn start_busy(c: &LocalCluster, nice: bool) -> Busy {
    let dir = tempfile::tempdir().unwrap().keep();
    let script = busy_script(&dir);
    let cmd: Vec<&str> = if nice {
        // Niced so that the master and the submitting clients, not the loops, get the
        // CPU when they need it; whether the jobs take turns does not depend on it.
        vec!["nice", "-n", "19", "sh", "-c", &script]
    } else {
        vec!["sh", "-c", &script]
    };
    let id = submit(c, "4x4", &cmd);
    let pids = rank_pids(&dir, 16, T);
    let _ = std::fs::remove_dir_all(&dir);
    Busy { id, pids }
}

fn cpu(pids: &[i32]) -> u64 {
    pids.iter().filter_map(|&p| cpu_ns(p)).sum()
}

fn running(pids: &[i32]) -> usize {
    pids.iter()
        .filter_map(|&p| proc_stat(p))
        .filter(|(st, _)| !is_stopped(st.to_owned()))
        .count()
}

/// Turns taken by two jobs over `span`: as in `tests/gang.rs`, a turn is a change of the
/// job running alone, sampled on a thread of its own at real-time priority where
/// permitted. A job ran in a sample interval (5 ms) if its ranks used a twentieth of a
/// CPU in it: they are niced, so on a machine busy with other work a job in its slot may
/// get little more than that, while a stopped one gets nothing (but the microseconds a
/// rank takes to stop, which can only make both seem to run, never a turn).
fn count_turns(a: &[i32], b: &[i32], span: Duration) -> usize {
    let (a, b) = (a.to_vec(), b.to_vec());
    std::thread::spawn(move || {
        realtime_sampler();
        let (mut la, mut lb, mut lt) = (cpu(&a), cpu(&b), Instant::now());
        let end = lt + span;
        let mut alone: Option<bool> = None;
        let mut turns = 0;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
            let (ca, cb, now) = (cpu(&a), cpu(&b), Instant::now());
            let ran = |used: u64| used as f64 > (now - lt).as_nanos() as f64 / 20.0;
            let (ra, rb) = (ran(ca.saturating_sub(la)), ran(cb.saturating_sub(lb)));
            if ra != rb {
                if alone.is_some_and(|x| x != ra) {
                    turns += 1;
                }
                alone = Some(ra);
            }
            (la, lb, lt) = (ca, cb, now);
        }
        turns
    })
    .join()
    .expect("the sampler does not panic")
}

// ---------------------------------------------------------------- 1. master SIGKILL

const CLIENTS: usize = 4;
const JOBS: usize = 1000;
const QUANTUM_MS: u64 = 100;

/// What the clients were told: token -> job id, and how the retries went.
#[derive(Default)]
struct Acks {
    ids: BTreeMap<String, u64>,
    /// Submissions that needed more than one call.
    retried: usize,
    /// Retried submissions answered with a job made before the answering call was sent:
    /// the master had saved the job but its answer was lost with it.
    answer_lost: usize,
    /// Failed calls in all.
    failed_calls: usize,
}

/// A client as prun is one: every submission carries its own token and is retried with
/// the same token, on a fresh connection, while the call fails in transit (the master
/// dies or is not back yet), until it is answered. A refusal is a test failure here.
async fn submit_client(
    addr: String,
    tokens: Vec<String>,
    acks: Arc<Mutex<Acks>>,
    count: Arc<AtomicUsize>,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut conn: Option<JobServiceClient<MasterChannel>> = None;
    for token in tokens {
        let req = v1::SubmitRequest {
            spec: Some(spec("1x1", &["true"], &token, &[])),
            client_token: token.clone(),
            ..Default::default()
        };
        let mut calls = 0;
        let job = loop {
            assert!(
                Instant::now() < deadline,
                "a client not done in 90 s (at {token})"
            );
            let Some(c) = (match conn.as_mut() {
                Some(c) => Some(c),
                None => {
                    conn = connect(&addr).await;
                    conn.as_mut()
                }
            }) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let sent = wall_ns();
            calls += 1;
            match c.submit(req.clone()).await {
                Ok(r) => break (r.into_inner().job.expect("a job in the answer"), sent),
                Err(s) => {
                    use tonic::Code;
                    let in_transit = matches!(s.code(), Code::Unknown | Code::Cancelled)
                        || (s.code() == Code::Unavailable
                            && !s.message().starts_with("state not saved"));
                    assert!(in_transit, "submission {token} refused: {s:?}");
                    acks.lock().unwrap().failed_calls += 1;
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let (job, sent) = job;
        let mut a = acks.lock().unwrap();
        if calls > 1 {
            a.retried += 1;
            if job.submit_ns < sent {
                a.answer_lost += 1;
            }
        }
        assert!(
            a.ids.insert(token.clone(), job.id).is_none(),
            "token {token} answered twice"
        );
        drop(a);
        count.fetch_add(1, Ordering::SeqCst);
    }
}

/// How the stored jobs match what the clients were told.
#[derive(Debug, PartialEq, Eq)]
struct Tally {
    /// Tokens acknowledged whose job is missing or is another job than the one named.
    lost: usize,
    /// Jobs beyond the first carrying one token.
    duplicates: usize,
    /// Jobs of the test's tokens nobody was told of.
    unacked: usize,
    /// Jobs listed with a test token.
    listed: usize,
}

/// Compare what the master lists (a job's name is its token) and what its database holds
/// (`client_token` in each row) with what the clients were told.
fn tally(
    c: &LocalCluster,
    rt: &tokio::runtime::Runtime,
    acks: &BTreeMap<String, u64>,
) -> (Tally, Tally) {
    let jobs = rt.block_on(async {
        let mut cl = jobs_client(c).await;
        list_all(&mut cl).await.expect("ListJobs")
    });
    let mut by_name: HashMap<String, Vec<u64>> = HashMap::new();
    for j in &jobs {
        let name = j.spec.as_ref().map(|s| s.name.clone()).unwrap_or_default();
        if name.starts_with("faults-") {
            by_name.entry(name).or_default().push(j.id);
        }
    }
    let api = compare(&by_name, acks);

    let db = rusqlite::Connection::open_with_flags(
        c.dir().join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the state database");
    let mut stmt = db.prepare("SELECT id, record FROM jobs").unwrap();
    let mut by_token: HashMap<String, Vec<u64>> = HashMap::new();
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
    {
        let (id, text) = row.unwrap();
        let rec: serde_json::Value = serde_json::from_str(&text).expect("a JSON job record");
        // prun gave the 4x4 jobs tokens of its own.
        if let Some(t) = rec["client_token"]
            .as_str()
            .filter(|t| t.starts_with("faults-"))
        {
            by_token.entry(t.to_string()).or_default().push(id as u64);
        }
    }
    (api, compare(&by_token, acks))
}

fn compare(found: &HashMap<String, Vec<u64>>, acks: &BTreeMap<String, u64>) -> Tally {
    Tally {
        lost: acks
            .iter()
            .filter(|(t, id)| !found.get(*t).is_some_and(|ids| ids.contains(id)))
            .count(),
        duplicates: found.values().map(|ids| ids.len().saturating_sub(1)).sum(),
        unacked: found.keys().filter(|t| !acks.contains_key(*t)).count(),
        listed: found.values().map(Vec::len).sum(),
    }
}

/// 4 clients submit 1,000 jobs through the API while the master is SIGKILLed mid-way and
/// restarted: every job a client was told of is stored exactly once, before and after one
/// more restart; the two 4x4 jobs sharing the mesh keep taking turns while it is down.
///
/// The 1x1 jobs queue: both slices are full with the 4x4 jobs, so they only test what
/// this is about (accepting, storing, recovering) rather than 1,000 launches on 2 cores,
/// and what is stored cannot change under the checks.
#[test]
fn master_sigkill_while_4_clients_submit_1000_jobs_loses_and_doubles_none() {
    let _one = serial();
    let q = QUANTUM_MS.to_string();
    let mut c = cluster(4, 4, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, true);
    let b = start_busy(&c, true);
    wait_for(T, "one of the 4x4 jobs to be switched out", || {
        (running(&a.pids) == 0 || running(&b.pids) == 0).then_some(())
    });
    let before = count_turns(&a.pids, &b.pids, Duration::from_secs(1));

    let rt = runtime();
    let acks = Arc::new(Mutex::new(Acks::default()));
    let count = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let tokens = (0..JOBS / CLIENTS)
                .map(|i| format!("faults-{k}-{i}"))
                .collect();
            rt.spawn(submit_client(
                c.master_addr().to_string(),
                tokens,
                acks.clone(),
                count.clone(),
            ))
        })
        .collect();
    // Mid-way (polled every 20 ms: within a few submissions of the middle).
    wait_for(T, "half the jobs to be acknowledged", || {
        (count.load(Ordering::SeqCst) >= JOBS / 2).then_some(())
    });
    let acked_at_kill = count.load(Ordering::SeqCst);
    let killed = Instant::now();
    c.stop_master(Signal::SIGKILL).unwrap();
    // The agents find the master's port closed: they wait for it, ranks keep switching.
    let outage_watch = Duration::from_secs(2);
    let turns_down = count_turns(&a.pids, &b.pids, outage_watch);
    let acked_while_down = count.load(Ordering::SeqCst) - acked_at_kill;
    c.start_master().unwrap();
    let ready = killed.elapsed();
    c.wait_nodes_up(T).unwrap();
    let nodes_up = killed.elapsed();
    rt.block_on(async {
        for h in clients {
            h.await.expect("a client failed");
        }
    });
    let submit_time = started.elapsed();
    let acks = std::mem::take(&mut *acks.lock().unwrap());
    assert_eq!(acks.ids.len(), JOBS, "every submission was answered");
    let (api, db) = tally(&c, &rt, &acks.ids);
    c.stop_master(Signal::SIGKILL).unwrap();
    c.start_master().unwrap();
    c.wait_nodes_up(T).unwrap();
    let (api2, db2) = tally(&c, &rt, &acks.ids);
    // Tokens were rebuilt at recovery: every submission sent again finds its job.
    let ch = rt.block_on(c.channel()).unwrap();
    let resubmit: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let mine: Vec<(String, u64)> = acks
                .ids
                .iter()
                .skip(k)
                .step_by(CLIENTS)
                .map(|(t, id)| (t.clone(), *id))
                .collect();
            let mut cl = JobServiceClient::new(ch.clone());
            rt.spawn(async move {
                let mut same = 0;
                for (token, id) in mine {
                    let req = v1::SubmitRequest {
                        spec: Some(spec("1x1", &["true"], &token, &[])),
                        client_token: token,
                        ..Default::default()
                    };
                    let j = cl.submit(req).await.expect("a resubmission").into_inner();
                    if j.job.map(|j| j.id) == Some(id) {
                        same += 1;
                    }
                }
                same
            })
        })
        .collect();
    let (same, stored) = rt.block_on(async {
        let mut same = 0;
        for h in resubmit {
            same += h.await.expect("a resubmitting client failed");
        }
        (
            same,
            list_all(&mut JobServiceClient::new(ch.clone()))
                .await
                .unwrap(),
        )
    });

    eprintln!(
        "master SIGKILL: {} jobs from {CLIENTS} clients in {submit_time:.2?}; killed at {acked_at_kill} acknowledged, {acked_while_down} more while down; \
         {} failed calls, {} submissions retried, {} of them answered with the job of a lost answer",
        acks.ids.len(),
        acks.failed_calls,
        acks.retried,
        acks.answer_lost
    );
    eprintln!(
        "outage: master ready {ready:.2?} after the kill ({outage_watch:?} of it watched), every node up again after {nodes_up:.2?}"
    );
    eprintln!(
        "switching: {:.1} turns/s before, {:.1} turns/s while the master was down ({turns_down} turns in {outage_watch:?}; quantum {QUANTUM_MS} ms)",
        before as f64,
        turns_down as f64 / outage_watch.as_secs_f64(),
    );
    eprintln!("after restart 1: API {api:?}, database {db:?}");
    eprintln!("after restart 2: API {api2:?}, database {db2:?}");
    eprintln!(
        "resubmitted every token after restart 2: {same}/{} answered with their job; {} jobs stored",
        acks.ids.len(),
        stored.len()
    );
    let want = Tally {
        lost: 0,
        duplicates: 0,
        unacked: 0,
        listed: JOBS,
    };
    for (when, t) in [
        ("API, restart 1", &api),
        ("database, restart 1", &db),
        ("API, restart 2", &api2),
        ("database, restart 2", &db2),
    ] {
        assert_eq!(t, &want, "{when}");
    }
    assert_eq!(same, JOBS);
    assert_eq!(stored.len(), JOBS + 2, "the 1,000 and the two 4x4 jobs");
    // Through two crashes the 4x4 jobs ran on, adopted, with every rank.
    for busy in [&a, &b] {
        let j = stored.iter().find(|j| j.id == busy.id).unwrap();
        assert_eq!(j.state(), v1::JobState::Running, "{j:?}");
        assert!(
            busy.pids.iter().all(|&p| alive(p)),
            "a rank of job {} died",
            busy.id
        );
    }
    assert!(
        stored
            .iter()
            .filter(|j| j.id != a.id && j.id != b.id)
            .all(|j| j.state() == v1::JobState::Queued),
        "the 1x1 jobs wait behind the full slices"
    );
    // 2 s of 100 ms slots: about 20 turns.
    assert!(
        turns_down >= 12,
        "switching stopped with the master: {turns_down} turns in {outage_watch:?}"
    );
    c.shutdown().unwrap();
}

// ---------------------------------------------------------------- 2. agent SIGKILL

/// Wait until job `id` has completed; else fail, once it ended otherwise or after `T`,
/// with what the master shows of it, its jobs and nodes, and the end of its log.
fn wait_completed(c: &LocalCluster, id: u64) -> serde_json::Value {
    let deadline = Instant::now() + T;
    let j = loop {
        let j = job(c, id);
        let ended =
            ["completed", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or(""));
        if ended || Instant::now() >= deadline {
            break j;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        j["state"] == "completed",
        "job {id} did not complete: {j}\nslices: {}\nnodes: {}\nmaster log:\n{}",
        gangctl_json(c, &["slices"]).unwrap_or_default(),
        gangctl_json(c, &["nodes"]).unwrap_or_default(),
        gang_local::log_tail(&c.master_log(), 30)
    );
    j
}

fn submit_api(
    rt: &tokio::runtime::Runtime,
    c: &LocalCluster,
    env: &[(&str, &str)],
    shape: &str,
    argv: &[&str],
) -> u64 {
    rt.block_on(async {
        let mut cl = jobs_client(c).await;
        cl.submit(v1::SubmitRequest {
            spec: Some(spec(shape, argv, "", env)),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job
        .expect("a job in the answer")
        .id
    })
}

/// A 2x2 job whose agent on one node is SIGKILLed: the job fails naming the node, the
/// nodes it held take a waiting job, the job beside it runs on, and of the failed job's
/// processes, found by process tree, none is left on any node: not the ranks (they carry
/// the agent's pdeathsig), and not what they started themselves on the dead node (the
/// agent's guard kills the ranks' process groups when the agent dies).
#[test]
fn agent_sigkill_mid_job_fails_it_frees_its_nodes_and_leaves_no_rank() {
    let _one = serial();
    let mut c = cluster(4, 2, &[]);
    let mark = c.dir().display().to_string();
    let rt = runtime();
    let env = [("FAULTS_MARK", mark.as_str())];
    let pid_dir = tempfile::tempdir().unwrap();
    // Each rank is a shell with a child of its own, as wrappers and launchers have.
    let rank = format!(
        "echo $$ > {}/pid.$GANG_RANK; sleep 600 & wait",
        pid_dir.path().display()
    );
    let a = submit_api(&rt, &c, &env, "2x2", &["sh", "-c", &rank]);
    let leaders = rank_pids(pid_dir.path(), 4, T);
    let b = submit_api(&rt, &c, &env, "2x2", &["sh", "-c", "sleep 600 & wait"]);
    for id in [a, b] {
        wait_for(T, &format!("job {id}'s 4 shells and 4 children"), || {
            (job_procs(&mark, id).len() == 8).then_some(())
        });
    }
    // The mesh is full (space sharing): this waits for nodes.
    let waiting = submit_api(&rt, &c, &env, "2x1", &["true"]);
    assert_eq!(job(&c, waiting)["state"], "queued");

    let ja = job(&c, a);
    let at = |j: &serde_json::Value, k: &str| j["submesh"][k].as_u64().unwrap() as u32;
    let (ax, ay) = (at(&ja, "x"), at(&ja, "y"));
    let (kx, ky) = (ax + 1, ay + 1);
    let killed = Instant::now();
    c.stop_agent(kx, ky, Signal::SIGKILL).unwrap();

    let failed = wait_state(&c, a, "failed", T);
    let to_failed = killed.elapsed();
    let reason = failed["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains(&format!("node ({kx},{ky}) lost")),
        "{failed}"
    );

    // Every process of the job is gone, on every node (a SIGKILLed process takes a
    // moment); what is reparented to us is reaped as it exits.
    let deadline = Instant::now() + T;
    loop {
        reap_orphans(&c.pids());
        let ranks_left = leaders.iter().filter(|&&p| alive(p)).count();
        let left = job_procs(&mark, a);
        if ranks_left == 0 && left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ranks_left} ranks of job {a} and these of its processes left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cleaned = killed.elapsed();

    // Its nodes are free: the waiting job runs there (the dead node aside).
    let done = wait_completed(&c, waiting);
    let (wx, wy, ww, wh) = (
        at(&done, "x"),
        at(&done, "y"),
        at(&done, "w"),
        at(&done, "h"),
    );
    assert!(
        wx >= ax && wx + ww <= ax + 2 && wy >= ay && wy + wh <= ay + 2,
        "the waiting job ran at {done} outside job {a}'s nodes {ja}"
    );
    // The job beside it was not touched.
    assert_eq!(job(&c, b)["state"], "running");
    assert_eq!(job_procs(&mark, b).len(), 8, "job {b} lost processes");
    // The agent back, the whole submesh takes a job again.
    c.start_agent(kx, ky).unwrap();
    c.wait_nodes_up(T).unwrap();
    let whole = submit_api(&rt, &c, &env, "2x2", &["true"]);
    let j = wait_completed(&c, whole);
    assert_eq!(j["submesh"], ja["submesh"], "{j}");

    // Nothing of the job came back: it outlived neither a new agent on its node nor
    // another job on its nodes.
    let orphans = job_procs(&mark, a);
    let listed: Vec<String> = orphans
        .iter()
        .map(|p| format!("{} (parent {}): {}", p.pid, p.ppid, p.cmdline))
        .collect();
    eprintln!(
        "agent SIGKILL of node ({kx},{ky}): job {a} failed after {to_failed:.2?} ({reason}); \
         every process of it, on every node, gone after {cleaned:.2?}; orphans: {}",
        orphans.len()
    );
    for p in &orphans {
        let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
    }
    assert!(orphans.is_empty(), "processes of job {a} left: {listed:?}");
    c.shutdown().unwrap();
}

// ---------------------------------------------------------------- 3. disk full

/// A tmpfs mounted for a test, unmounted when dropped, also when the test fails.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount runs");
        assert!(
            st.success(),
            "cannot mount a tmpfs at {} (this test needs root)",
            dir.display()
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut cmd = std::process::Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(&self.dir).status().is_ok_and(|s| s.success())
        };
        // Lazily if something still holds it (a process of a failed test not yet gone).
        if !umount(false) {
            umount(true);
        }
    }
}

/// Write zeros to `path` until the file system is full; the bytes written.
fn fill(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let mut written = 0u64;
    // Large pieces, then small ones for the last partly free pages.
    for size in [1 << 16, 512, 1] {
        let chunk = vec![0u8; size];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    written
}

/// A cluster as [`cluster`] makes them, with the master's database at `state`.
fn cluster_with_state(w: u32, h: u32, state: &Path) -> LocalCluster {
    let args = [
        "--heartbeat-ms",
        "100",
        "--node-timeout-ms",
        "1500",
        "--kill-grace-ms",
        "1000",
        "--mpl",
        "1",
    ];
    let opts = LocalClusterOptions {
        bin_dir: Some(bin_dir()),
        master_args: args.iter().map(|s| s.to_string()).collect(),
        state: Some(state.to_path_buf()),
        ..LocalClusterOptions::default()
    };
    LocalCluster::start((w, h), opts).expect("local cluster starts")
}

/// Lines of a log holding every one of `needles`, colours aside (`key=value` fields may
/// come with escape sequences between key, `=` and value).
fn count_lines(path: &Path, needles: &[&str]) -> usize {
    let plain = |line: &str| {
        let mut out = String::with_capacity(line.len());
        let mut chars = line.chars();
        while let Some(ch) = chars.next() {
            if ch == '\u{1b}' {
                // CSI: ESC [ parameters, ended by a letter.
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(ch);
            }
        }
        out
    };
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .map(plain)
                .filter(|l| needles.iter().all(|n| l.contains(n)))
                .count()
        })
        .unwrap_or(0)
}

/// What the master answered while its disk was full.
#[derive(Debug, Default)]
struct WhileFull {
    reads_ok: usize,
    /// Reads answered `state not saved` (they shared a batch with a write that failed).
    reads_not_saved: usize,
    /// Reads that failed otherwise (transport, anything else).
    reads_failed: Vec<String>,
    /// Samples in which ListNodes showed a node not up.
    nodes_not_up: usize,
    submits_refused: usize,
    /// Samples in which a rank of the running job was gone.
    ranks_gone: usize,
}

/// The master's database on a small tmpfs, filled: submissions are refused with a clear
/// error while the master stays up and answers reads; space freed, it accepts again, and
/// after a restart every job stored before is there with its state, in a sound database.
#[test]
fn disk_full_refuses_submissions_keeps_answering_and_loses_nothing() {
    let _one = serial();
    let base = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&base.path().join("state"), "4m");
    let db = fs.dir.join("state.db");
    let mut c = cluster_with_state(2, 2, &db);
    let rt = runtime();
    let (mut jobs, mut admin) = rt.block_on(async {
        let ch = c.channel().await.unwrap();
        (
            JobServiceClient::new(ch.clone()),
            v1::admin_service_client::AdminServiceClient::new(ch),
        )
    });

    // Stored before: a completed job, a running one, and jobs queued behind it.
    let done = submit(&c, "1x1", &["true"]);
    wait_state(&c, done, "completed", T);
    let pid_dir = tempfile::tempdir().unwrap();
    let script = format!(
        "echo $$ > {}/pid.$GANG_RANK; exec sleep 600",
        pid_dir.path().display()
    );
    let run = submit(&c, "1x2", &["sh", "-c", &script]);
    let run_pids = rank_pids(pid_dir.path(), 2, T);
    wait_state(&c, run, "running", T);
    let submit_req = |token: String| v1::SubmitRequest {
        spec: Some(spec("2x2", &["true"], &token, &[])),
        client_token: token,
        ..Default::default()
    };
    rt.block_on(async {
        for i in 0..20 {
            jobs.submit(submit_req(format!("disk-{i}")))
                .await
                .expect("submitted");
        }
    });
    let states = |jobs: &mut JobServiceClient<MasterChannel>| -> BTreeMap<u64, i32> {
        rt.block_on(list_all(jobs))
            .expect("ListJobs")
            .iter()
            .map(|j| (j.id, j.state))
            .collect()
    };
    let mut stored = states(&mut jobs);
    assert_eq!(stored.len(), 22);

    // Full: submissions go on being accepted while SQLite finds room in pages it has
    // (the WAL's and the database's), then are refused.
    let filled = fill(&fs.dir.join("zeros"));
    let full_at = Instant::now();
    let mut accepted_full = 0;
    let refusal = rt.block_on(async {
        for i in 0..10_000 {
            match jobs.submit(submit_req(format!("disk-full-{i}"))).await {
                Ok(r) => {
                    accepted_full += 1;
                    let j = r.into_inner().job.unwrap();
                    stored.insert(j.id, j.state);
                }
                Err(s) => return s,
            }
        }
        panic!("10,000 submissions accepted on a full disk");
    });
    assert_eq!(refusal.code(), tonic::Code::Unavailable, "{refusal:?}");
    assert!(
        refusal.message().starts_with("state not saved: ")
            && refusal.message().contains("database or disk is full"),
        "{refusal:?}"
    );

    // Full for longer than the node timeout and the master's 5 s run-time save.
    let mut seen = WhileFull::default();
    let watch_for = Duration::from_secs(6);
    let until = Instant::now() + watch_for;
    let ids: Vec<u64> = stored.keys().copied().collect();
    let mut k = 0;
    while Instant::now() < until {
        let id = ids[k % ids.len()];
        k += 1;
        let reads = rt.block_on(async {
            let a = jobs
                .get_job(v1::GetJobRequest { job_id: id })
                .await
                .map(|r| r.into_inner().state == stored[&id]);
            let b = jobs
                .list_jobs(v1::ListJobsRequest {
                    states: vec![],
                    limit: 1_000_000,
                })
                .await
                .map(|r| r.into_inner().jobs.len() == stored.len());
            let n = admin.list_nodes(v1::ListNodesRequest {}).await.map(|r| {
                r.into_inner()
                    .nodes
                    .iter()
                    .all(|n| n.state() == v1::NodeState::Up)
            });
            [a, b, n]
        });
        for (i, r) in reads.into_iter().enumerate() {
            match r {
                Ok(true) => seen.reads_ok += 1,
                Ok(false) if i == 2 => {
                    seen.reads_ok += 1;
                    seen.nodes_not_up += 1;
                }
                Ok(false) => seen
                    .reads_failed
                    .push(format!("read {i} of job {id}: a changed answer")),
                Err(s) if s.message().starts_with("state not saved") => seen.reads_not_saved += 1,
                Err(s) => seen.reads_failed.push(format!("{s:?}")),
            }
        }
        if k % 10 == 0 {
            let r = rt.block_on(jobs.submit(submit_req(format!("disk-refused-{k}"))));
            match r {
                Err(s) if s.message().contains("database or disk is full") => {
                    seen.submits_refused += 1
                }
                other => panic!("a submission on the full disk: {other:?}"),
            }
        }
        if run_pids.iter().any(|&p| !alive(p)) {
            seen.ranks_gone += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    c.check_alive().expect("the master and agents stay up");
    let full_for = full_at.elapsed();
    let not_saved_batches = count_lines(&c.master_log(), &["batch not saved"]);
    // Ticks (run time is saved every 5 s) and outcomes of calls to agents: no reply.
    let not_saved_silent = count_lines(&c.master_log(), &["batch not saved", "replies=0"]);
    let heartbeats_failed: usize = (0..2)
        .flat_map(|x| (0..2).map(move |y| (x, y)))
        .map(|(x, y)| count_lines(&c.agent_log(x, y), &["heartbeat failed"]))
        .sum();
    let fenced: usize = (0..2)
        .flat_map(|x| (0..2).map(move |y| (x, y)))
        .map(|(x, y)| count_lines(&c.agent_log(x, y), &["has not answered for longer"]))
        .sum();

    // Space back: the same master accepts again, no restart needed.
    std::fs::remove_file(fs.dir.join("zeros")).unwrap();
    let after = rt
        .block_on(jobs.submit(submit_req("disk-after".into())))
        .expect("accepted once space is back")
        .into_inner()
        .job
        .unwrap();
    stored.insert(after.id, after.state);

    c.stop_master(Signal::SIGKILL).unwrap();
    c.start_master().unwrap();
    c.wait_nodes_up(T).unwrap();
    let mut jobs = rt.block_on(jobs_client(&c));
    let recovered = states(&mut jobs);
    let changed: Vec<String> = stored
        .iter()
        .filter(|(id, st)| recovered.get(id) != Some(st))
        .map(|(id, st)| format!("job {id}: {st} then {:?}", recovered.get(id)))
        .collect();
    let ranks_alive = run_pids.iter().filter(|&&p| alive(p)).count();
    c.shutdown().unwrap();

    let conn = rusqlite::Connection::open(&db).expect("open the database");
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .unwrap();
    drop(conn);

    eprintln!(
        "disk full: {filled} bytes of zeros; {accepted_full} submissions still accepted, then refused: {}",
        refusal.message()
    );
    eprintln!(
        "while full ({full_for:.2?}): {seen:?}; master: {not_saved_batches} batches not saved ({not_saved_silent} without a reply in them); \
         agents: {heartbeats_failed} heartbeats failed, {fenced} fences fallen"
    );
    eprintln!(
        "space freed: accepted again without a restart (job {}); after a restart {} of {} jobs as stored, running job's ranks alive {ranks_alive}/2; \
         integrity_check: {integrity}; {rows} rows",
        after.id,
        stored.len() - changed.len(),
        stored.len()
    );
    assert!(seen.reads_failed.is_empty(), "{:?}", seen.reads_failed);
    assert!(seen.reads_ok > 0);
    assert!(seen.submits_refused > 0);
    assert_eq!(
        seen.ranks_gone, 0,
        "the running job lost ranks on the full disk"
    );
    assert_eq!(
        ranks_alive, 2,
        "the running job lost ranks after the restart"
    );
    assert!(changed.is_empty(), "{changed:?}");
    assert_eq!(integrity, "ok");
    assert_eq!(rows as usize, stored.len());
    drop(fs);
}
