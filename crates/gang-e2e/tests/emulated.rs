//! Emulated fleets: the real master, real agent code many nodes to a process, ranks played
//! instead of run (`gang-agent --emulate`). What the emulation must keep of a real
//! cluster: every node registers and is placed, output and exit codes come back as from
//! real ranks, a cancel ends the played ranks, and no rank process is ever started; and
//! played fences take the real fence path, through the master or among the agents; and
//! exits gathered up a job's tree reach the master in batches.

use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::{LocalCluster, LocalClusterOptions};

const T: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every process under `pid` (its children, theirs, ...).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let path = t.path().join("children");
            let kids = std::fs::read_to_string(path).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// Established TCP connections to `port` (IPv4, this network namespace): /proc/net/tcp
/// lists both ends of each; the client's is the one whose remote port is `port`.
fn connections_to(port: u16) -> usize {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "01"
                && f[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

#[test]
fn a_16x16_fleet_in_two_processes_runs_jobs_as_real_ranks_would_end() {
    // Fences through the master (among the agents is the default: the test below).
    let opts = LocalClusterOptions {
        emulate: Some(128),
        ..options(&["--mpl", "2", "--fences", "master"])
    };
    let c = LocalCluster::start((16, 16), opts).expect("emulated cluster starts");
    // The master and two agent processes of 128 nodes each.
    assert_eq!(c.pids().len(), 3, "{:?}", c.pids());
    let nodes = gangctl_json(&c, &["nodes"]).expect("gangctl nodes");
    let up = nodes["nodes"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|n| n["state"] == "up")
        .count();
    assert_eq!(up, 256, "{nodes}");
    // One connection to the master per emulated node (its session and uplink share it).
    let port = c.agents_addr().expect("the master's agent address").port();
    let mut seen = 0;
    wait_for(T, "one connection to the master per emulated node", || {
        seen = connections_to(port);
        (seen == 256).then_some(())
    });
    assert_eq!(seen, 256);

    // Every node runs its rank: 256 different names.
    let out = prun(&c, &["-n", "16x16", "--", "hostname"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names: std::collections::BTreeSet<String> =
        text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(names.len(), 256, "{names:?}");
    assert!(names.contains("node-15-15") && names.contains("node-0-0"));

    // An exit code comes back as prun's.
    let out = prun(&c, &["-n", "4x4", "--", "sh", "-c", "exit 3"], None);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    // All 256 ranks fence through the master: every value comes back, rank 0 times each
    // (a loaded 2-core host launches them seconds apart: the fence waits for the last).
    let fences = played_fences(&c, "16x16", 3);
    assert_eq!(fences["ranks"], 256, "{fences}");
    // A rank 7 s late only delays the fence: the agent's fence call is a long poll, each
    // call held 2 s at most, where one call used to end at the channel's 5 s and fail it.
    let late = played_fences_late(&c, "2x2", 2, 7);
    assert!(late["fence_ms"][0].as_f64().unwrap() >= 6_500.0, "{late}");

    // What a node cannot play is the launch's error, naming what it can.
    let out = prun(&c, &["-n", "2x2", "--", "./a.out"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("an emulated node cannot play"),
        "{}",
        text(&out.stderr)
    );

    // A long job sharing the mesh in time with another; a cancel ends its played ranks
    // and frees its nodes for the next job.
    let long = submit(&c, "16x16", &["sleep", "600"]);
    wait_state(&c, long, "running", T);
    let beside = submit(&c, "8x8", &["sleep", "1"]);
    let done = wait_for(T, "the 8x8 job beside it to end", || {
        let j = job(&c, beside);
        ["completed", "failed", "cancelled"]
            .contains(&j["state"].as_str().unwrap_or(""))
            .then_some(j)
    });
    assert_eq!(done["state"], "completed", "{done}");
    let out = gangctl(&c, &["cancel", &long.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_state(&c, long, "cancelled", T);
    let out = prun(&c, &["-n", "16x16", "--", "true"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Not one rank process was started: the agents' processes have no children.
    let agents: Vec<u32> = c.pids().into_iter().skip(1).collect();
    for a in agents {
        assert_eq!(descendants(a), Vec::<u32>::new(), "agent process {a}");
    }
    c.shutdown().expect("shutdown");
}

/// `prun -n SHAPE fence ROUNDS 450`: it succeeds (every rank saw every rank's value) and
/// rank 0's line of fence times is returned.
fn played_fences(c: &LocalCluster, shape: &str, rounds: usize) -> serde_json::Value {
    played_fences_late(c, shape, rounds, 0)
}

/// The same with the job's last rank `late_s` seconds late to its first fence.
fn played_fences_late(
    c: &LocalCluster,
    shape: &str,
    rounds: usize,
    late_s: u32,
) -> serde_json::Value {
    let (rounds_arg, late) = (rounds.to_string(), late_s.to_string());
    let out = prun(
        c,
        &["-n", shape, "--", "fence", &rounds_arg, "450", &late],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: serde_json::Value =
        serde_json::from_str(text(&out.stdout).trim()).expect("rank 0's JSON line");
    let times = line["fence_ms"].as_array().expect("fence times");
    assert_eq!(times.len(), rounds, "{line}");
    assert_eq!(line["bytes"], 450, "{line}");
    line
}

fn fence_bytes(c: &LocalCluster, path: &str) -> u64 {
    let text = http_get(c.metrics_addr(), "/metrics");
    let label = format!("gang_fence_bytes_total{{path=\"{path}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&label)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn played_fences_among_the_agents_cost_the_master_a_few_bytes_whatever_the_size() {
    // 128 ranks in one process, fences gathered among their agents four wide.
    let opts = LocalClusterOptions {
        emulate: Some(128),
        ..options(&["--fences", "agents", "--fanout-width", "4"])
    };
    let c = LocalCluster::start((16, 8), opts).expect("emulated cluster starts");
    let small = played_fences(&c, "2x2", 5);
    assert_eq!(small["ranks"], 4);
    let after_small = fence_bytes(&c, "agents");
    let big = played_fences(&c, "16x8", 5);
    assert_eq!(big["ranks"], 128);
    let after_big = fence_bytes(&c, "agents") - after_small;
    // A rank 7 s late among the agents only delays the fence, as through the master.
    let late = played_fences_late(&c, "2x2", 2, 7);
    assert!(late["fence_ms"][0].as_f64().unwrap() >= 6_500.0, "{late}");
    // Nothing through the master's fence path; what it hears per fence does not grow
    // with the job (a few bytes each: job, epoch, byte count).
    assert_eq!(fence_bytes(&c, "master"), 0);
    assert!(after_small > 0 && after_small <= 5 * 32, "{after_small}");
    assert!(
        after_big <= after_small + 5 * 8,
        "{after_big} vs {after_small}"
    );
    // A played fence past the repertoire's limits is the launch's error, naming them.
    let out = prun(&c, &["-n", "2x2", "--", "fence", "10001", "8"], None);
    assert!(
        text(&out.stderr).contains("ROUNDS is 1..=10000"),
        "{}",
        text(&out.stderr)
    );
    c.shutdown().expect("shutdown");
}

#[test]
fn a_fleet_past_the_emulation_bound_is_refused_before_anything_starts() {
    let opts = LocalClusterOptions {
        emulate: Some(1024),
        ..options(&[])
    };
    let Err(e) = LocalCluster::start((200, 200), opts) else {
        panic!("a 200x200 fleet is refused");
    };
    assert!(
        e.to_string()
            .contains("40000 emulated nodes; a local cluster emulates at most 16384"),
        "{e}"
    );
}

// Exits gathered up a job's tree (issue "10,000 nodes, finished"): clean exits reach
// the master in a few batches, not a call per rank; a failure reaches it at once, alone.

/// The master's `name` counter with label how="`how`" (0 before the first).
fn counted(c: &LocalCluster, name: &str, how: &str) -> u64 {
    let page = http_get(c.metrics_addr(), "/metrics");
    let label = format!("{name}{{how=\"{how}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&label)?.trim().parse().ok())
        .unwrap_or(0)
}

/// (calls, ranks) reported `how` so far.
fn reports(c: &LocalCluster, how: &str) -> (u64, u64) {
    (
        counted(c, "gang_exit_reports_total", how),
        counted(c, "gang_exit_report_ranks_total", how),
    )
}

#[test]
fn a_jobs_exits_reach_the_master_in_a_few_batches_and_a_failure_at_once() {
    let opts = LocalClusterOptions {
        emulate: Some(64),
        ..options(&["--fences", "agents", "--fanout-width", "4"])
    };
    let c = LocalCluster::start((8, 8), opts).expect("emulated cluster starts");

    for round in 0..2 {
        let (single0, batch0) = (reports(&c, "single"), reports(&c, "batch"));
        let out = prun(&c, &["-n", "8x8", "--", "true"], None);
        assert!(out.status.success(), "round {round}: {}", text(&out.stderr));
        // The job ended, so every exit is at the master (counted just after).
        let batch = wait_for(T, "64 ranks counted in batches", || {
            let b = reports(&c, "batch");
            (b.1 - batch0.1 >= 64).then_some(b)
        });
        let single = reports(&c, "single");
        let (calls, ranks) = (batch.0 - batch0.0, batch.1 - batch0.1);
        assert_eq!(ranks, 64, "round {round}: every clean exit came in a batch");
        assert_eq!(single.0 - single0.0, 0, "round {round}: none alone");
        eprintln!("round {round}: {calls} batch calls for {ranks} ranks");
        // One batch from the root when every subtree completes; a loaded host may make
        // a subtree late and send partial batches, still far fewer than ranks.
        assert!(
            (1..=16).contains(&calls),
            "round {round}: {calls} batch calls for 64 ranks"
        );
    }

    // Every rank fails with 3: the first failure is sent at once, alone, and the job
    // fails with its code (the others are killed).
    let single0 = reports(&c, "single");
    let started = Instant::now();
    let out = prun(&c, &["-n", "8x8", "--", "sh", "-c", "exit 3"], None);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    wait_for(T, "a failure reported alone", || {
        (reports(&c, "single").0 > single0.0).then_some(())
    });
    // Nothing of the job waited for a linger (at most 5 s a node) up the tree.
    assert!(
        took < Duration::from_secs(20),
        "the failed job took {took:?} to end"
    );

    // A clean job after the failed one is still gathered.
    let batch0 = reports(&c, "batch");
    let out = prun(&c, &["-n", "4x4", "--", "true"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for(T, "16 ranks counted in batches", || {
        (reports(&c, "batch").1 - batch0.1 == 16).then_some(())
    });

    // A cancel's deaths are what the master asked for: they come up the tree too, not
    // one call a rank.
    let (single0, batch0) = (reports(&c, "single"), reports(&c, "batch"));
    let id = submit(&c, "8x8", &["sleep", "600"]);
    wait_state(&c, id, "running", T);
    let out = gangctl(&c, &["cancel", &id.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_state(&c, id, "cancelled", T);
    let batch = wait_for(T, "the cancelled ranks counted in batches", || {
        let b = reports(&c, "batch");
        (b.1 - batch0.1 >= 64).then_some(b)
    });
    let single = reports(&c, "single").0 - single0.0;
    assert_eq!(single, 0, "no cancelled rank reported alone");
    assert!(
        batch.0 - batch0.0 <= 16,
        "{} batch calls for 64 cancelled ranks",
        batch.0 - batch0.0
    );
    c.shutdown().expect("shutdown");
}

/// The sum of the master's `name` samples (every label).
fn metric(c: &LocalCluster, name: &str) -> f64 {
    http_get(c.metrics_addr(), "/metrics")
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// 4,096 emulated nodes in four processes (release builds), the default tree (16 wide)
/// and the default liveness for that size: one job over all of them is launched through the tree (no
/// node routed around), runs, and is cancelled; every rank's end comes back up the tree
/// and every node is free again.
#[test]
fn four_thousand_ranks_are_launched_through_the_tree_and_cancelled() {
    let long = Duration::from_secs(900);
    let opts = LocalClusterOptions {
        bin_dir: Some(release_bin_dir()),
        master_args: vec!["--mpl".into(), "1".into()],
        emulate: Some(1024),
        nodes_up_timeout: long,
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    let c = LocalCluster::start((64, 64), opts).expect("a 4,096-node emulated fleet starts");
    assert_eq!(c.pids().len(), 5, "the master and four agent processes");
    let (single0, batch0) = (reports(&c, "single"), reports(&c, "batch"));

    let id = submit(&c, "64x64", &["sleep", "600"]);
    wait_state(&c, id, "running", long);
    assert_eq!(metric(&c, "gang_relayed_orders_total{work=\"launch\""), 1.0);
    let j = job(&c, id);
    assert_eq!(j["ranks_done"].as_u64().unwrap_or(0), 0, "{j}");
    let busy = |c: &LocalCluster| {
        let nodes = gangctl_json(c, &["nodes"]).expect("gangctl nodes");
        let list = nodes["nodes"].as_array().cloned().unwrap_or_default();
        let up = list.iter().filter(|n| n["state"] == "up").count();
        let with_job = list
            .iter()
            .filter(|n| n["jobs"].as_array().is_some_and(|j| !j.is_empty()))
            .count();
        (up, with_job)
    };
    assert_eq!(busy(&c), (4096, 4096), "every node up and running the job");
    // A node the launch did not reach would have failed the job (it ends cancelled
    // below, not failed). Nodes routed around on the way (their head reached them) are
    // only counted: under this host's load a few connections between agents fail.
    eprintln!(
        "nodes routed around: {}",
        metric(&c, "gang_relay_unreached_total")
    );

    let out = gangctl(&c, &["cancel", &id.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_state(&c, id, "cancelled", long);
    // Every rank's end came back, up the tree: the cancel's deaths are gathered.
    let batch = wait_for(long, "4,096 cancelled ranks reported", || {
        let b = reports(&c, "batch");
        (b.1 - batch0.1 >= 4096).then_some(b)
    });
    assert_eq!(reports(&c, "single").0 - single0.0, 0, "none alone");
    eprintln!(
        "4,096 ranks ended in {} batch calls on the master",
        batch.0 - batch0.0
    );
    wait_for(long, "every node free and up", || {
        (busy(&c) == (4096, 0)).then_some(())
    });
    c.shutdown().ok();
}
