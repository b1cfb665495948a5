//! The master SIGKILLed while 4 API clients submit 1,000 jobs: none lost, none doubled.

use super::*;

pub(crate) const CLIENTS: usize = 4;
pub(crate) const JOBS: usize = 1000;
pub(crate) const QUANTUM_MS: u64 = 100;

/// What the clients were told: token -> job id, and how the retries went.
#[derive(Default)]
pub(crate) struct Acks {
    pub(crate) ids: BTreeMap<String, u64>,
    /// Submissions that needed more than one call.
    pub(crate) retried: usize,
    /// Retried submissions answered with a job made before the answering call was sent:
    /// the master had saved the job but its answer was lost with it.
    pub(crate) answer_lost: usize,
    /// Failed calls in all.
    pub(crate) failed_calls: usize,
}

/// A client as prun is one: every submission carries its own token and is retried with
/// the same token, on a fresh connection, while the call fails in transit (the master
/// dies or is not back yet), until it is answered. A refusal is a test failure here.
pub(crate) async fn submit_client(
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
pub(crate) struct Tally {
    /// Tokens acknowledged whose job is missing or is another job than the one named.
    pub(crate) lost: usize,
    /// Jobs beyond the first carrying one token.
    pub(crate) duplicates: usize,
    /// Jobs of the test's tokens nobody was told of.
    pub(crate) unacked: usize,
    /// Jobs listed with a test token.
    pub(crate) listed: usize,
}

/// Compare what the master lists (a job's name is its token) and what its database holds
/// (`client_token` in each row) with what the clients were told.
pub(crate) fn tally(
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

pub(crate) fn compare(found: &HashMap<String, Vec<u64>>, acks: &BTreeMap<String, u64>) -> Tally {
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
pub(crate) fn master_sigkill_while_4_clients_submit_1000_jobs_loses_and_doubles_none() {
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
