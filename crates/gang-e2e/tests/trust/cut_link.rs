//! An agent cut off from the master in a network namespace.

use super::*;

/// Gone, or a zombie nobody reaped yet: not running either way.
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

fn net_ns_inode(pid: i32) -> u64 {
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .expect("the rank's network namespace")
        .ino()
}

/// When the first log line holding every one of `parts` was written: seconds since the
/// start of its day (both daemons log UTC timestamps from the same host clock).
fn logged_at(log: &str, parts: &[&str]) -> Option<f64> {
    let line = log
        .lines()
        .map(without_colours)
        .find(|l| parts.iter().all(|p| l.contains(p)))?;
    // 2026-01-02T03:04:05.678901Z ...
    let time = line.split_whitespace().next()?.split_once('T')?.1;
    let mut hms = time.trim_end_matches('Z').split(':');
    let (h, m, s): (f64, f64, f64) = (
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Poll `f` every 10 ms until it returns `Some`, for at most `timeout`.
fn until<V>(timeout: Duration, mut f: impl FnMut() -> Option<V>) -> Option<V> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The master's lease in this test: short, so that a partition outlasts it.
const LEASE_MS: u64 = 10_000;

/// Node (1,0)'s agent runs in a network namespace, joined to the host by a veth pair;
/// cutting the link mid-job: the master counts the node lost (it hears node (0,0)
/// meanwhile) and fails the job naming it; the agent keeps its rank until the master's
/// lease is out, then stops it; mending it: the agent registers again, the node is up,
/// and a new job runs on it.
#[test]
fn an_agent_cut_off_in_a_network_namespace() {
    if !root() {
        return;
    }
    let ns = Netns::create();
    // The master's agent port on every address, so the namespace reaches it across the
    // veth; the other agents still dial loopback.
    let mut c = cluster_with(2, 1, |o| {
        o.agents_listen = Some(Ipv4Addr::UNSPECIFIED.into());
        o.master_args
            .extend(["--agent-lease-ms".to_string(), LEASE_MS.to_string()]);
    });
    let port = c.agents_addr().expect("the agent port").port();
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("agent-1-0-netns.log");

    c.stop_agent(1, 0, Signal::SIGTERM).unwrap();
    let tls = c.pki().files(&PeerName::Node { x: 1, y: 0 });
    let args: Vec<String> = [
        "--master",
        &format!("https://{}:{port}", ns.host_ip),
        "--x",
        "1",
        "--y",
        "0",
        "--listen",
        &format!("{}:0", ns.ns_ip),
        "--tls-ca",
        tls.ca.to_str().unwrap(),
        "--tls-cert",
        tls.cert.to_str().unwrap(),
        "--tls-key",
        tls.key.to_str().unwrap(),
        "--allow-root",
        "--kill-grace-ms",
        "500",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut agent = ns.spawn(&bin_dir().join("gang-agent"), &args, &log);
    let ns_prefix = format!("{}:", ns.ns_ip);
    let rt = runtime();
    let ch = rt.block_on(c.channel()).expect("the master's socket");
    let node_10 = || {
        rt.block_on(async {
            AdminServiceClient::new(ch.clone())
                .list_nodes(ListNodesRequest {})
                .await
                .expect("ListNodes")
                .into_inner()
                .nodes
                .into_iter()
                .find(|n| (n.x, n.y) == (1, 0))
                .expect("node (1,0) is listed")
        })
    };
    let moved = until(T, || {
        let n = node_10();
        (n.state() == NodeState::Up && n.address.starts_with(&ns_prefix)).then_some(())
    });
    assert!(
        moved.is_some(),
        "node (1,0) not up from the namespace: {:?}; agent log:\n{}",
        node_10(),
        log_tail(&log, 30)
    );

    // A job across both nodes; the rank on (1,0) runs inside the namespace.
    let ranks = tempfile::tempdir().unwrap();
    let d = ranks.path().display();
    let script = format!(
        "echo $GANG_NODE > {d}/node.$GANG_RANK; echo $$ > {d}/pid.$GANG_RANK; exec sleep 600"
    );
    let job = gang_e2e::submit(&c, "2x1", &["sh", "-c", &script]);
    let pids = rank_pids(ranks.path(), 2, T);
    let node_of = |r: usize| {
        std::fs::read_to_string(ranks.path().join(format!("node.{r}")))
            .unwrap()
            .trim()
            .to_string()
    };
    let cut = (0..2)
        .find(|&r| node_of(r) == "1,0")
        .expect("a rank on (1,0)");
    let (cut_pid, other_pid) = (pids[cut], pids[1 - cut]);
    assert_eq!(net_ns_inode(cut_pid), ns.inode());
    assert_ne!(net_ns_inode(other_pid), ns.inode());
    wait_state(&c, job, "running", T);

    // Cut the cable.
    let cut_at = Instant::now();
    ns.set_link(false);
    let (mut down, mut failed, mut kept_at_failure) = (None, None, None);
    let done = until(T, || {
        let t = cut_at.elapsed();
        if down.is_none() && node_10().state() == NodeState::Down {
            down = Some(t);
        }
        if failed.is_none() {
            let j = rt.block_on(async {
                JobServiceClient::new(ch.clone())
                    .get_job(GetJobRequest { job_id: job })
                    .await
                    .expect("GetJob")
                    .into_inner()
            });
            if j.state() == JobState::Failed {
                failed = Some((t, j.reason));
                kept_at_failure = Some(!gone(cut_pid));
            }
        }
        (down.is_some() && failed.is_some()).then_some(())
    });
    assert!(
        done.is_some(),
        "after the cut: node down {down:?}, job failed {failed:?}; agent log:\n{}",
        log_tail(&log, 30)
    );
    let (down, (failed, reason)) = (down.unwrap(), failed.unwrap());
    assert!(
        reason.starts_with("node (1,0) lost"),
        "the reason names the node: {reason}"
    );
    assert_eq!(
        kept_at_failure,
        Some(true),
        "the cut agent keeps its rank while the lease lasts"
    );
    wait_for(T, "the rank on (0,0) to be stopped by the master", || {
        gone(other_pid).then_some(())
    });
    // The lease runs out: the agent stops the rank by itself.
    let stopped = until(T, || gone(cut_pid).then(|| cut_at.elapsed()));
    let stopped = stopped.unwrap_or_else(|| {
        panic!(
            "the cut rank still runs {:?} after the cut; agent log:\n{}",
            cut_at.elapsed(),
            log_tail(&log, 30)
        )
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the master has not answered for its whole lease: stopping the ranks here"),
        "the lease ran out: {text}"
    );
    assert!(agent.running(), "the cut agent keeps trying");

    // Mend it.
    let mended_at = Instant::now();
    ns.set_link(true);
    let rejoined = until(Duration::from_secs(30), || {
        let n = node_10();
        (n.state() == NodeState::Up).then(|| (mended_at.elapsed(), n))
    });
    let rejoined = rejoined.unwrap_or_else(|| {
        panic!(
            "node (1,0) not back within 30 s; agent log:\n{}",
            log_tail(&log, 30)
        )
    });
    let (rejoined, n) = rejoined;
    assert!(
        n.address.starts_with(&ns_prefix) && n.jobs.is_empty(),
        "{n:?}"
    );
    let registrations = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("registered with the master")
            .count()
    };
    // The master counts the node up as it answers; the agent logs the answer after.
    let logged = until(T, || (registrations() >= 2).then_some(()));
    assert!(logged.is_some(), "{}", log_tail(&log, 30));
    let out = prun(
        &c,
        &["-n", "2x1", "--label", "--", "sh", "-c", "echo $GANG_NODE"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: BTreeSet<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines, ["0: 0,0".to_string(), "1: 1,0".to_string()].into());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        registrations(),
        2,
        "registered once at the start and once after the cut: {text}"
    );
    assert!(!text.contains(" ERROR "), "{text}");

    // Seen from the logs (one host, one clock): when the master gave up on the node and
    // when its agent's lease ran out.
    let master_text = std::fs::read_to_string(c.master_log()).unwrap();
    let gave_up = logged_at(&master_text, &["agent silent: node down", "node=1,0"]);
    let lease_out = logged_at(&text, &["for its whole lease"]);
    let lease_after_ms = gave_up
        .zip(lease_out)
        .map(|(m, a)| format!("{:+.0} ms", (a - m) * 1000.0))
        .unwrap_or_else(|| "?".into());
    eprintln!(
        "cut link: node (1,0) down after {} ms, job failed after {} ms, its rank there kept until the lease ({LEASE_MS} ms) ran out, stopped after {} ms ({lease_after_ms} after the master gave up, by the logs); mended: node up again after {} ms",
        down.as_millis(),
        failed.as_millis(),
        stopped.as_millis(),
        rejoined.as_millis()
    );
    // Down within the node timeout (3 s) and a heartbeat of the other node, with room for
    // a loaded machine; the rank kept for the lease (counted from the agent's last
    // answer, at most one heartbeat, 100 ms, before the cut) and stopped within its
    // kill grace (500 ms) after it, with room.
    assert!(down < Duration::from_secs(6), "{down:?}");
    let lease = Duration::from_millis(LEASE_MS);
    assert!(stopped >= lease - Duration::from_millis(200), "{stopped:?}");
    assert!(stopped < lease + Duration::from_secs(5), "{stopped:?}");
    drop(agent);
    c.shutdown().unwrap();
}
