//! Exits gathered up a job's tree (issue "10,000 nodes, finished"): on an emulated fleet
//! whose launches and fences go through a tree four wide, a job's clean exits reach the
//! master in a few batches, not a call per rank, and the job still ends with its code; a
//! failure reaches it at once, one call, and fails the job with the rank's code.

use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::{LocalCluster, LocalClusterOptions};

const T: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

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
    c.shutdown().expect("shutdown");
}
