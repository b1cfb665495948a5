//! An agent SIGKILLed mid-job: the job fails, its nodes are freed, no rank is left.

use super::*;

/// Wait until job `id` has completed; else fail, once it ended otherwise or after `T`,
/// with what the master shows of it, its jobs and nodes, and the end of its log.
pub(crate) fn wait_completed(c: &LocalCluster, id: u64) -> serde_json::Value {
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

pub(crate) fn submit_api(
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
pub(crate) fn agent_sigkill_mid_job_fails_it_frees_its_nodes_and_leaves_no_rank() {
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
