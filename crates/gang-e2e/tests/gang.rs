//! Time sharing on the real cluster: 16 agents switch slices on a shared clock.
//!
//! Ranks are CPU-bound shell loops; what the tests look at is what the kernel says of
//! them in `/proc/PID/stat` (stopped or not, CPU time used), sampled every few ms.

use std::time::{Duration, Instant};

use gang_e2e::*;

const T: Duration = Duration::from_secs(30);
const QUANTUM_MS: u64 = 100;

struct Job {
    id: u64,
    pids: Vec<i32>,
}

fn start_busy(c: &gang_cli::local_cluster::LocalCluster, shape: &str, n: usize) -> Job {
    let dir = tempfile::tempdir().unwrap().keep();
    let id = submit(c, shape, &["sh", "-c", &busy_script(&dir)]);
    let pids = rank_pids(&dir, n, T);
    Job { id, pids }
}

/// How many of `pids` are not stopped, and their total CPU ticks.
fn running(pids: &[i32]) -> (usize, u64) {
    pids.iter()
        .filter_map(|&p| proc_stat(p))
        .fold((0, 0), |(n, cpu), (st, t)| {
            (n + usize::from(!is_stopped(st)), cpu + t)
        })
}

/// Sample both jobs for `span`: the longest stretch during which both had a rank not
/// stopped, the number of times each was seen fully stopped, and their CPU ticks used.
struct Watch {
    longest_overlap: Duration,
    a_stopped_runs: usize,
    b_stopped_runs: usize,
    a_cpu: u64,
    b_cpu: u64,
    samples: usize,
}

fn watch(a: &Job, b: &Job, span: Duration) -> Watch {
    let (_, a0) = running(&a.pids);
    let (_, b0) = running(&b.pids);
    let end = Instant::now() + span;
    let mut w = Watch {
        longest_overlap: Duration::ZERO,
        a_stopped_runs: 0,
        b_stopped_runs: 0,
        a_cpu: 0,
        b_cpu: 0,
        samples: 0,
    };
    let mut overlap_since: Option<Instant> = None;
    let (mut a_was_stopped, mut b_was_stopped) = (false, false);
    while Instant::now() < end {
        let now = Instant::now();
        let (ar, _) = running(&a.pids);
        let (br, _) = running(&b.pids);
        w.samples += 1;
        if ar > 0 && br > 0 {
            let since = *overlap_since.get_or_insert(now);
            w.longest_overlap = w.longest_overlap.max(now - since);
        } else {
            overlap_since = None;
        }
        if ar == 0 && !a_was_stopped {
            w.a_stopped_runs += 1;
        }
        if br == 0 && !b_was_stopped {
            w.b_stopped_runs += 1;
        }
        a_was_stopped = ar == 0;
        b_was_stopped = br == 0;
        std::thread::sleep(Duration::from_millis(2));
    }
    w.a_cpu = running(&a.pids).1 - a0;
    w.b_cpu = running(&b.pids).1 - b0;
    w
}

/// Both jobs are in a table in force: one of them is seen fully stopped.
fn wait_switching(a: &Job, b: &Job) {
    wait_for(
        T,
        "one of the jobs to be stopped by its slice table",
        || (running(&a.pids).0 == 0 || running(&b.pids).0 == 0).then_some(()),
    );
}

/// Two CPU-bound 4x4 jobs in two slices alternate, share the CPU evenly, and keep
/// alternating on the agents' last table after the master is killed. A cancel reaches a
/// job even while it is stopped.
#[test]
fn two_4x4_jobs_alternate_and_share_the_cpu() {
    let q = QUANTUM_MS.to_string();
    let mut c = cluster(4, 4, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, "4x4", 16);
    let b = start_busy(&c, "4x4", 16);
    wait_switching(&a, &b);

    let w = watch(&a, &b, Duration::from_secs(4));
    let share = w.a_cpu as f64 / (w.a_cpu + w.b_cpu) as f64;
    eprintln!(
        "samples {}, longest overlap {:?}, stopped runs {}/{}, cpu {}/{} ticks, share {share:.3}",
        w.samples, w.longest_overlap, w.a_stopped_runs, w.b_stopped_runs, w.a_cpu, w.b_cpu
    );
    // 4 s at 100 ms slots: about 20 turns each.
    assert!(
        w.a_stopped_runs >= 10 && w.b_stopped_runs >= 10,
        "they do not alternate"
    );
    // Both run at once only around a boundary (the spread of 16 agents' switches).
    assert!(
        w.longest_overlap < Duration::from_millis(QUANTUM_MS / 4),
        "both jobs ran together for {:?}",
        w.longest_overlap
    );
    assert!(
        (0.45..=0.55).contains(&share),
        "CPU share of job A {share:.3}"
    );

    // The matrix shows the row running now.
    let m = gangctl_json(&c, &["slices"]).unwrap();
    assert_eq!(m["row_slices"].as_array().map(|r| r.len()), Some(2), "{m}");
    assert!(m["running_row"].is_u64(), "{m}");

    // No master: the agents keep cycling their last table.
    c.stop_master(nix::sys::signal::Signal::SIGKILL).unwrap();
    let w = watch(&a, &b, Duration::from_secs(2));
    assert!(
        w.a_stopped_runs >= 5 && w.b_stopped_runs >= 5,
        "switching stopped with the master ({} / {})",
        w.a_stopped_runs,
        w.b_stopped_runs
    );
    assert!(w.longest_overlap < Duration::from_millis(QUANTUM_MS / 4));

    // Back up: the jobs are adopted, and cancelling one that is stopped now kills it.
    c.start_master().unwrap();
    c.wait_nodes_up(T).unwrap();
    let stopped = wait_for(T, "a job to be stopped", || {
        if running(&a.pids).0 == 0 {
            Some(&a)
        } else if running(&b.pids).0 == 0 {
            Some(&b)
        } else {
            None
        }
    });
    let out = gangctl(&c, &["cancel", &stopped.id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = wait_state(&c, stopped.id, "cancelled", T);
    // Killed by its SIGTERM, not by SIGKILL after the grace: it was continued to take it.
    assert_eq!(j["exit_code"], 128 + 15, "{j}");
    c.shutdown().unwrap();
}

/// A narrow job placed beside two wide ones runs in both slots (multiple tasks), and a
/// time limit counts only the time a job was scheduled to run.
#[test]
fn multiple_tasks_run_in_every_slot_and_limits_count_run_time() {
    let q = QUANTUM_MS.to_string();
    let c = cluster(4, 4, &["--mpl", "2", "--quantum-ms", &q]);
    // 3x4 in slice 0, another 3x4 in slice 1, then a 1x4 column free in both.
    let a = start_busy(&c, "3x4", 12);
    let b = start_busy(&c, "3x4", 12);
    let narrow = start_busy(&c, "1x4", 4);
    let m = gangctl_json(&c, &["slices"]).unwrap();
    let in_slices = m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["placements"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["job"] == narrow.id)
        })
        .count();
    assert_eq!(in_slices, 2, "{m}");
    wait_switching(&a, &b);
    // While A runs and while B runs, the narrow job runs too: it is never stopped.
    let w = watch(&a, &b, Duration::from_secs(2));
    assert!(w.a_stopped_runs >= 5 && w.b_stopped_runs >= 5);
    for _ in 0..200 {
        assert_eq!(running(&narrow.pids).0, 4, "the multiple task was stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    for j in [&a, &b, &narrow] {
        gangctl(&c, &["cancel", &j.id.to_string()]);
        wait_state(&c, j.id, "cancelled", T);
    }

    // Two full-mesh jobs take turns; the limited one runs half the time, so 1 s of limit
    // takes about 2 s of wall time.
    let _other = start_busy(&c, "4x4", 16);
    let dir = tempfile::tempdir().unwrap();
    let out = prun(
        &c,
        &[
            "-n",
            "4x4",
            "--detach",
            "--time-limit",
            "1",
            "--",
            "sh",
            "-c",
            &busy_script(dir.path()),
        ],
        None,
    );
    assert!(out.status.success());
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let j = wait_state(&c, id, "cancelled", T);
    let wall = (j["end_ns"].as_i64().unwrap() - j["start_ns"].as_i64().unwrap()) as f64 / 1e9;
    let run = j["run_ns"].as_i64().unwrap() as f64 / 1e9;
    eprintln!("time-limited job: wall {wall:.2} s, run {run:.2} s");
    assert!((1.0..1.4).contains(&run), "run time {run}: {j}");
    assert!(
        wall > 1.6,
        "the limit counted stopped time: wall {wall} s: {j}"
    );
    assert!(j["reason"].as_str().unwrap().contains("time limit"), "{j}");
    c.shutdown().unwrap();
}
