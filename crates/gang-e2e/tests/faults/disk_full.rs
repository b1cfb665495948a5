//! The disk under the master's database full: refused clearly, nothing lost.

use super::*;

/// A tmpfs mounted for a test, unmounted when dropped, also when the test fails.
pub(crate) struct Tmpfs {
    pub(crate) dir: PathBuf,
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
pub(crate) fn fill(path: &Path) -> u64 {
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
pub(crate) fn cluster_with_state(w: u32, h: u32, state: &Path) -> LocalCluster {
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
pub(crate) fn count_lines(path: &Path, needles: &[&str]) -> usize {
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
pub(crate) struct WhileFull {
    pub(crate) reads_ok: usize,
    /// Reads answered `state not saved` (they shared a batch with a write that failed).
    pub(crate) reads_not_saved: usize,
    /// Reads that failed otherwise (transport, anything else).
    pub(crate) reads_failed: Vec<String>,
    /// Samples in which ListNodes showed a node not up.
    pub(crate) nodes_not_up: usize,
    pub(crate) submits_refused: usize,
    /// Samples in which a rank of the running job was gone.
    pub(crate) ranks_gone: usize,
}

/// The master's database on a small tmpfs, filled: submissions are refused with a clear
/// error while the master stays up and answers reads; space freed, it accepts again, and
/// after a restart every job stored before is there with its state, in a sound database.
#[test]
pub(crate) fn disk_full_refuses_submissions_keeps_answering_and_loses_nothing() {
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
            let b = gang_cli::jobs::listing::list(&mut jobs, &[], 0)
                .await
                .map(|all| all.len() == stored.len())
                .map_err(|e| match e {
                    gang_cli::connect::CliError::Rpc(s) => s,
                    e => tonic::Status::unknown(e.to_string()),
                });
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
