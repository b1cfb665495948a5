//! Orders for many agents through a tree of agents (`--fanout-width`): a job's launch,
//! its signal and the slice tables reach every node though the master calls only a few;
//! an agent that does not answer is routed around, and its job fails naming it.

use std::time::Duration;

use gang_e2e::{
    cluster, example, gangctl, gangctl_json, job, metric, prun, submit, wait_for, wait_state,
};
use gang_local::LocalCluster;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Bounds a wait that normally takes a second or two.
const T: Duration = Duration::from_secs(60);

/// The command succeeded; else fail with what it said.
fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn relayed(c: &LocalCluster, work: &str) -> f64 {
    metric(
        c,
        "gang_relayed_orders_total",
        &[&format!("work=\"{work}\"")],
    )
}

/// 16 agents, a tree two wide: every rank of a 4x4 job starts and is heard from, two
/// jobs are switched by tables that came down the tree, and a cancel reaches every rank.
#[test]
fn a_job_is_launched_switched_and_cancelled_through_a_tree_of_agents() {
    let c = cluster(
        4,
        4,
        &[
            "--fanout-width",
            "2",
            "--fences",
            "agents",
            "--mpl",
            "2",
            "--quantum-ms",
            "100",
        ],
    );
    let out = prun(
        &c,
        &["-n", "4x4", "--", "sh", "-c", "echo rank=$GANG_RANK"],
        None,
    );
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ranks: Vec<u32> = text
        .lines()
        .filter_map(|l| l.trim().rsplit("rank=").next()?.parse().ok())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..16).collect::<Vec<_>>(), "{text}");
    assert!(
        relayed(&c, "launch") >= 1.0,
        "the launch did not go down the tree"
    );

    // A program that fences (the messaging library's ring finds its neighbours through
    // the job's key-value space): its fences are gathered among its agents, the master
    // hears only that each completed.
    let ring = example("ring").display().to_string();
    let out = prun(&c, &["-n", "4x4", "--", &ring, "--seconds", "1"], None);
    succeeded(&out);
    // Rank 0's agent sends the record after answering the fence: it may come after the job.
    wait_for(T, "the master to hear of a fence among the agents", || {
        (metric(&c, "gang_fences_done_total", &[]) >= 1.0).then_some(())
    });
    assert!(metric(&c, "gang_fence_bytes_total", &["path=\"agents\""]) > 0.0);
    assert_eq!(
        metric(&c, "gang_fence_bytes_total", &["path=\"master\""]),
        0.0,
        "a fence went through the master"
    );

    // Two jobs in two rows: both run, in turn, on tables that came down the tree.
    let tables_before = relayed(&c, "tables");
    let a = submit(&c, "4x4", &["sleep", "600"]);
    let b = submit(&c, "4x4", &["sleep", "600"]);
    for id in [a, b] {
        wait_state(&c, id, "running", T);
    }
    wait_for(T, "a slice table for both rows to go down the tree", || {
        (relayed(&c, "tables") > tables_before).then_some(())
    });
    // Every node holds the newest table (what its heartbeat reports).
    let latest = gangctl_json(&c, &["slices"]).unwrap()["table_version"]
        .as_u64()
        .expect("a table version");
    wait_for(T, "every node to hold the newest table", || {
        let nodes = gangctl_json(&c, &["nodes"]).unwrap();
        let all = nodes["nodes"].as_array().unwrap();
        (all.len() == 16
            && all
                .iter()
                .all(|n| n["table_version"].as_u64().unwrap_or(0) >= latest))
        .then_some(())
    });

    // A cancel is one signal order down the tree; every rank exits.
    let signals_before = relayed(&c, "signal");
    let out = gangctl(&c, &["cancel", &a.to_string(), &b.to_string()]);
    succeeded(&out);
    for id in [a, b] {
        wait_state(&c, id, "cancelled", T);
    }
    assert!(relayed(&c, "signal") >= signals_before + 2.0);
    assert_eq!(metric(&c, "gang_relay_unreached_total", &[]), 0.0);
    c.shutdown().unwrap();
}

/// The agent of node (1,0) is stopped: it heads a subtree of (0,0)'s in a 4x4 job's
/// launch (width 2: (0,0) forwards 1..5 through (1,0) and 5..8 through (1,1)). It is
/// routed around after its bound; the job fails naming it, and no rank is left anywhere
/// once it is continued.
#[test]
fn a_stopped_interior_agent_is_routed_around_and_named() {
    let mut c = cluster(
        4,
        4,
        &["--fanout-width", "2", "--relay-hop-timeout-ms", "2000"],
    );
    let agent = Pid::from_raw(c.agent_pid(1, 0).expect("node (1,0)'s agent") as i32);
    kill(agent, Signal::SIGSTOP).unwrap();
    let id = submit(&c, "4x4", &["sleep", "599"]);
    let failed = wait_state(&c, id, "failed", T);
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("node (1,0) not reached from node (0,0)"),
        "{failed}"
    );
    assert!(metric(&c, "gang_relay_unreached_total", &[]) >= 1.0);
    kill(agent, Signal::SIGCONT).unwrap();
    // Whatever reached the stopped agent late is killed at its next heartbeat.
    wait_for(T, "every rank of the failed job to be gone", || {
        let j = job(&c, id);
        let procs = std::process::Command::new("pgrep")
            .args(["-f", "^sleep 599$"])
            .output()
            .unwrap();
        (j["state"] == "failed" && procs.stdout.is_empty()).then_some(())
    });
    // The cluster goes on: a job on every node runs to its end.
    let out = prun(&c, &["-n", "4x4", "--", "true"], None);
    succeeded(&out);
    c.shutdown().unwrap();
}

/// `prun -v` shows a launch's progress down the tree while it is under way: the agent of
/// node (0,2), head of the second of the master's two subtrees in a 4x4 job (width 2),
/// is stopped, so the launch waits on it with one subtree done; once `prun` has said so,
/// the agent is continued within its bound, the launch completes and the job succeeds
/// (a slow head is waited for, not routed around).
#[test]
fn prun_v_shows_a_launch_s_progress_and_a_stopped_head_continued_in_time_is_waited_for() {
    use gang_e2e::Master;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut c = cluster(
        4,
        4,
        // Nodes are not declared lost while the agent is stopped (seconds on a loaded host).
        &["--fanout-width", "2", "--node-timeout-ms", "60000"],
    );
    let agent = Pid::from_raw(c.agent_pid(0, 2).expect("node (0,2)'s agent") as i32);
    kill(agent, Signal::SIGSTOP).unwrap();
    let mut child = Command::new(gang_e2e::bin_dir().join("prun"))
        .args(["-v", "-n", "4x4", "--", "true"])
        .env("GANG_MASTER", c.master())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prun runs");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let want = "prun: launch 1 of 2 subtrees done, 8 of 16 ranks started";
    let deadline = std::time::Instant::now() + T;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l == want) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => {
                kill(agent, Signal::SIGCONT).unwrap();
                let _ = child.kill();
                panic!("prun -v did not say {want:?} within {T:?}; it said {seen:?}");
            }
        }
    }
    kill(agent, Signal::SIGCONT).unwrap();
    let (out, killed) = gang_e2e::output_within(child, T);
    let said = reader.join().unwrap();
    assert!(!killed, "prun did not end within {T:?}: {said}");
    assert!(out.status.success(), "the launch waited for: {said}");
    assert!(
        said.contains("launch 2 of 2 subtrees done, 16 of 16 ranks started")
            || !said.contains("launch 2 of 2"),
        "a later progress line adds up: {said}"
    );
    assert_eq!(metric(&c, "gang_relay_unreached_total", &[]), 0.0, "{said}");
    c.shutdown().unwrap();
}
