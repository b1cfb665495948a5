//! Time sharing on the real cluster: 16 agents switch slices on a shared clock.
//!
//! Ranks are CPU-bound shell loops; what the tests look at is what the kernel says of
//! them in `/proc/PID/stat` (stopped or not, CPU time used), sampled every few ms.

use std::time::{Duration, Instant};

use gang_e2e::*;

const T: Duration = Duration::from_secs(30);

/// One 4x4 cluster of CPU-bound jobs at a time: two at once on 2 cores would measure each
/// other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
const QUANTUM_MS: u64 = 100;

struct Job {
    id: u64,
    pids: Vec<i32>,
}

fn start_busy(c: &gang_local::LocalCluster, shape: &str, n: usize) -> Job {
    let dir = tempfile::tempdir().unwrap().keep();
    let id = submit(c, shape, &["sh", "-c", &busy_script(&dir)]);
    let pids = rank_pids(&dir, n, T);
    // The ranks' script is loaded; the directory only held their pids.
    let _ = std::fs::remove_dir_all(&dir);
    Job { id, pids }
}

/// CPU time used so far by `pids`, ns.
fn cpu(pids: &[i32]) -> u64 {
    pids.iter().filter_map(|&p| cpu_ns(p)).sum()
}

/// What sampling both jobs every ~2 ms showed. A job *ran* in an interval between two
/// samples if its ranks used CPU time in it (a rank signalled to stop may still show as
/// runnable until it is next scheduled, but it no longer runs).
/// The longest interval between two samples that tells which job ran in it.
const RESOLUTION: Duration = Duration::from_millis(10);

struct Watch {
    /// The longest stretch of consecutive intervals in which both jobs ran.
    longest_overlap: Duration,
    /// Intervals in which both ran, and all intervals.
    overlap_intervals: usize,
    /// Intervals too long to tell overlap from turns (a late sample) in which both ran.
    unresolved: usize,
    samples: usize,
    /// Turns: how many times the job running alone changed (A alone, then B alone, ...).
    turns: usize,
    a_cpu: u64,
    b_cpu: u64,
}

fn watch(a: &Job, b: &Job, span: Duration) -> Watch {
    if !realtime_sampler() {
        eprintln!("sampling without real-time priority: samples may come late");
    }
    let (a0, b0) = (cpu(&a.pids), cpu(&b.pids));
    let end = Instant::now() + span;
    let mut w = Watch {
        longest_overlap: Duration::ZERO,
        overlap_intervals: 0,
        unresolved: 0,
        samples: 0,
        turns: 0,
        a_cpu: 0,
        b_cpu: 0,
    };
    let (mut last_a, mut last_b, mut last_t) = (a0, b0, Instant::now());
    let mut overlap_since: Option<Instant> = None;
    let mut alone: Option<bool> = None; // Some(true): A alone
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
        let (ca, cb) = (cpu(&a.pids), cpu(&b.pids));
        let now = Instant::now();
        w.samples += 1;
        // Ran: used at least an eighth of the two CPUs over the interval (a rank that was
        // told to stop still takes a few microseconds to do so when it is next scheduled).
        let ran = |used: u64| used as f64 > (now - last_t).as_nanos() as f64 / 4.0;
        let (ra, rb) = (
            ran(ca.saturating_sub(last_a)),
            ran(cb.saturating_sub(last_b)),
        );
        if ra != rb {
            if alone.is_some_and(|x| x != ra) {
                w.turns += 1;
            }
            alone = Some(ra);
        }
        // A late sample's interval may span a switch: both jobs ran in it, one after the
        // other; it cannot tell overlap from turns (an 82 ms gap once read as overlap).
        if ra && rb && now - last_t > RESOLUTION {
            w.unresolved += 1;
            overlap_since = None;
        } else if ra && rb {
            w.overlap_intervals += 1;
            let since = *overlap_since.get_or_insert(last_t);
            w.longest_overlap = w.longest_overlap.max(now - since);
        } else {
            overlap_since = None;
        }
        (last_a, last_b, last_t) = (ca, cb, now);
    }
    assert!(
        w.unresolved * 10 <= w.samples,
        "samples too late to tell overlap: {} of {}",
        w.unresolved,
        w.samples
    );
    w.a_cpu = cpu(&a.pids).saturating_sub(a0);
    w.b_cpu = cpu(&b.pids).saturating_sub(b0);
    w
}

/// Both jobs are in a table in force: one of them is seen fully stopped.
fn wait_switching(a: &Job, b: &Job) {
    wait_for(
        T,
        "one of the jobs to be stopped by its slice table",
        || (running(&a.pids) == 0 || running(&b.pids) == 0).then_some(()),
    );
}

/// Two CPU-bound 4x4 jobs in two slices alternate, share the CPU evenly, and keep
/// alternating on the agents' last table after the master is killed. A cancel reaches a
/// job even while it is stopped.
#[test]
fn two_4x4_jobs_alternate_and_share_the_cpu() {
    let _one = serial();
    let q = QUANTUM_MS.to_string();
    let mut c = cluster(4, 4, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, "4x4", 16);
    let b = start_busy(&c, "4x4", 16);
    wait_switching(&a, &b);

    let w = watch(&a, &b, Duration::from_secs(4));
    let share = w.a_cpu as f64 / (w.a_cpu + w.b_cpu) as f64;
    eprintln!(
        "samples {}, overlapping {} (longest {:?}), turns {}, cpu {}/{} ms, share {share:.3}",
        w.samples,
        w.overlap_intervals,
        w.longest_overlap,
        w.turns,
        w.a_cpu / 1_000_000,
        w.b_cpu / 1_000_000
    );
    // 4 s at 100 ms slots: about 40 turns.
    assert!(w.turns >= 30, "they do not alternate: {} turns", w.turns);
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

    // Every agent reported its switches: skew per boundary, in stats and in Prometheus.
    let st = gangctl_json(&c, &["stats"]).unwrap();
    assert!(st["skew"]["count"].as_u64().unwrap() >= 10, "{st}");
    assert!(
        st["switch_latency"]["count"].as_u64().unwrap() >= 16 * 10,
        "{st}"
    );
    eprintln!("stats: {st}");
    let metrics = http_get(c.metrics_addr(), "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gang_switch_skew_seconds_count") && !l.ends_with(" 0")),
        "{metrics}"
    );
    let nodes = gangctl_json(&c, &["nodes"]).unwrap();
    for n in nodes["nodes"].as_array().unwrap() {
        assert!(n["table_version"].as_u64().unwrap() >= 1, "{n}");
    }

    // No master: the agents keep cycling their last table.
    c.stop_master(nix::sys::signal::Signal::SIGKILL).unwrap();
    let w = watch(&a, &b, Duration::from_secs(2));
    eprintln!(
        "without master: samples {}, overlapping {} (longest {:?}), turns {}, cpu {}/{} ms",
        w.samples,
        w.overlap_intervals,
        w.longest_overlap,
        w.turns,
        w.a_cpu / 1_000_000,
        w.b_cpu / 1_000_000
    );
    assert!(
        w.turns >= 15,
        "switching stopped with the master: {} turns",
        w.turns
    );
    assert!(w.longest_overlap < Duration::from_millis(QUANTUM_MS / 4));

    // Back up: the jobs are adopted, and cancelling one that is stopped now kills it.
    c.start_master().unwrap();
    c.wait_nodes_up(T).unwrap();
    let stopped = wait_for(T, "a job to be stopped", || {
        if running(&a.pids) == 0 {
            Some(&a)
        } else if running(&b.pids) == 0 {
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
    let _one = serial();
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
    assert!(w.turns >= 15, "{} turns", w.turns);
    for _ in 0..200 {
        assert_eq!(running(&narrow.pids), 4, "the multiple task was stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    for j in [&a, &b, &narrow] {
        gangctl(&c, &["cancel", &j.id.to_string()]);
        wait_state(&c, j.id, "cancelled", T);
    }

    // Two full-mesh jobs take turns; the limited one runs half the time, so 1 s of limit
    // takes about 2 s of wall time.
    let _other = start_busy(&c, "4x4", 16);

    // prun's output keeps flowing while its job is stopped and continued every slot.
    let out = prun(
        &c,
        &[
            "-n",
            "4x4",
            "--label",
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do echo line $i; awk 'BEGIN{for(j=0;j<300000;j++)s+=j}'; done",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for r in 0..16 {
        for i in 1..=5 {
            assert!(
                text.contains(&format!("{r}: line {i}\n")),
                "rank {r} line {i}: {text}"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = prun(
        &c,
        &[
            "-n",
            "4x4",
            "--detach",
            "--time-limit",
            "1s",
            "--",
            "sh",
            "-c",
            &busy_script(dir.path()),
        ],
        None,
    );
    assert!(out.status.success());
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let j = wait_state(&c, id, "timeout", T);
    let wall = (j["end_ns"].as_i64().unwrap() - j["start_ns"].as_i64().unwrap()) as f64 / 1e9;
    let run = j["run_ns"].as_i64().unwrap() as f64 / 1e9;
    eprintln!("time-limited job: wall {wall:.2} s, run {run:.2} s");
    assert!((1.0..1.6).contains(&run), "run time {run}: {j}");
    assert!(
        wall > 1.6,
        "the limit counted stopped time: wall {wall} s: {j}"
    );
    assert!(j["reason"].as_str().unwrap().contains("time limit"), "{j}");
    c.shutdown().unwrap();
}

/// The ranks of job `id` (found by their environment), once `n` of them run.
fn ranks_of(id: u64, n: usize) -> Vec<i32> {
    let mark = format!("GANG_JOB_ID={id}");
    wait_for(T, &format!("{n} ranks of job {id}"), || {
        let pids: Vec<i32> = gang_local::proc_table::all_procs()
            .into_iter()
            .filter(|p| p.alive() && p.env().contains(&mark))
            .map(|p| p.pid)
            .collect();
        (pids.len() == n).then_some(pids)
    })
}

/// CPU time `pids` use per second of wall time over `span`.
fn cpu_rate(pids: &[i32], span: Duration) -> f64 {
    let (c0, t0) = (cpu(pids), Instant::now());
    std::thread::sleep(span);
    (cpu(pids) - c0) as f64 / t0.elapsed().as_nanos() as f64
}

/// A deadlocked job under `--on-deadlock report` gives its time back. Beside a CPU-bound
/// job in the other slice (at first each has every other slot), once found deadlocked it
/// is held stopped and its slice leaves the rotation: the busy job is never stopped
/// again, its run time grows with the clock, and it gets as much CPU as when it was
/// alone. Cancelled, the parked job ends.
#[test]
fn a_deadlocked_job_gives_its_slots_to_the_cpu_bound_job_beside_it() {
    let _one = serial();
    let q = QUANTUM_MS.to_string();
    let c = cluster(2, 1, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, "2x1", 2);
    if !realtime_sampler() {
        eprintln!("sampling without real-time priority: samples may come late");
    }
    let alone = cpu_rate(&a.pids, Duration::from_secs(2));
    let deadlock = example("deadlock");
    let dl = submit(&c, "2x1", &[deadlock.to_str().unwrap()]);
    let dl_pids = ranks_of(dl, 2);
    let m = wait_for(T, "the deadlocked job parked by the table in force", || {
        let m = gangctl_json(&c, &["slices"]).ok()?;
        (m["parked"] == serde_json::json!([dl])).then_some(m)
    });
    assert_eq!(m["row_slices"].as_array().map(|r| r.len()), Some(1), "{m}");
    let j = job(&c, dl);
    assert!(j.get("deadlock").is_some(), "{j}");
    assert_eq!(j["state"], "running", "{j}");
    let text = String::from_utf8_lossy(&gangctl(&c, &["slices"]).stdout).into_owned();
    assert!(
        text.contains(&format!(
            "job {dl} is DEADLOCKED: held stopped, no slots, until cancelled"
        )),
        "{text}"
    );

    // The whole machine for the busy job: sampled every 5 ms for 2 s.
    let (run0, t0, c0, dl_c0) = (
        job(&c, a.id)["run_ns"].as_i64().unwrap(),
        Instant::now(),
        cpu(&a.pids),
        cpu(&dl_pids),
    );
    let (mut samples, mut busy_stopped, mut dl_running) = (0, 0, 0);
    while t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
        samples += 1;
        busy_stopped += a.pids.len() - running(&a.pids);
        dl_running += running(&dl_pids);
    }
    let wall = t0.elapsed().as_nanos() as f64;
    let parked = (cpu(&a.pids) - c0) as f64 / wall;
    let run = (job(&c, a.id)["run_ns"].as_i64().unwrap() - run0) as f64;
    eprintln!(
        "busy job: {alone:.2} CPUs alone, {parked:.2} beside the parked job; run time {:.2} of the wall clock; {samples} samples",
        run / wall
    );
    assert_eq!(
        busy_stopped, 0,
        "the busy job was stopped with the other slice parked"
    );
    assert_eq!(dl_running, 0, "the parked job ran");
    assert!(
        run / wall > 0.9,
        "the busy job is not scheduled in every slot: {:.2}",
        run / wall
    );
    // What the busy job gets of the CPUs depends on what else this host runs (the two
    // rates are printed); that the parked job takes none of them does not.
    let dl_cpu = (cpu(&dl_pids) - dl_c0) as f64 / wall;
    assert!(
        dl_cpu < 0.01,
        "the parked job used {dl_cpu:.3} CPUs while held stopped"
    );

    assert!(gangctl(&c, &["cancel", &dl.to_string()]).status.success());
    wait_state(&c, dl, "cancelled", T);
    // The table in force names it until the next one takes effect (a table lead later).
    wait_for(
        T,
        "the cancelled job to leave the table's parked jobs",
        || {
            let m = gangctl_json(&c, &["slices"]).unwrap();
            m.get("parked").is_none().then_some(())
        },
    );
    assert!(gangctl(&c, &["cancel", &a.id.to_string()]).status.success());
    c.shutdown().unwrap();
}

/// A step of an allocation runs in the allocation's slots: beside a job in the other
/// slice, the step (started by prun in the allocation's batch script, not queued) and the
/// job alternate as two jobs do, and the step's end leaves the allocation running.
#[test]
fn a_step_is_switched_with_its_allocation() {
    let _one = serial();
    let q = QUANTUM_MS.to_string();
    let c = cluster(2, 2, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, "2x2", 4);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("steps.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#GANG -n 2x2 -o {out}/alloc.out\nprun -- sh -c '{busy}' \n",
            out = dir.path().display(),
            busy = busy_script(dir.path())
        ),
    )
    .unwrap();
    // prun first in PATH, as `gangctl start` gives it: the script runs it on its node.
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(bin_dir().join("gangctl"))
        .args(["submit", "--parsable", script.to_str().unwrap()])
        .env("GANG_MASTER", c.master())
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alloc: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let step = Job {
        id: alloc + 1,
        pids: rank_pids(dir.path(), 4, T),
    };
    wait_switching(&a, &step);
    let w = watch(&a, &step, Duration::from_secs(3));
    eprintln!(
        "job and step: samples {} ({} late), overlapping {} (longest {:?}), turns {}, cpu {}/{} ms",
        w.samples,
        w.unresolved,
        w.overlap_intervals,
        w.longest_overlap,
        w.turns,
        w.a_cpu / 1_000_000,
        w.b_cpu / 1_000_000
    );
    assert!(
        w.turns >= 15,
        "the step does not alternate with the job: {} turns",
        w.turns
    );
    assert!(
        w.longest_overlap < Duration::from_millis(QUANTUM_MS / 4),
        "the step ran with the job for {:?}",
        w.longest_overlap
    );
    // The step is no job of the scheduler's: it holds no slice of its own.
    let m = gangctl_json(&c, &["slices"]).unwrap();
    assert!(
        !m.to_string().contains(&format!("\"job\":{}", step.id)),
        "{m}"
    );
    let s = gangctl_json(&c, &["job", &step.id.to_string()]).unwrap();
    assert_eq!(s["allocation_id"], alloc, "{s}");
    assert_eq!(
        s["slices"],
        gangctl_json(&c, &["job", &alloc.to_string()]).unwrap()["slices"]
    );
    // Cancelling the allocation ends the step, stopped or not, then the allocation.
    let out = gangctl(&c, &["cancel", &alloc.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(T, "the step's ranks to be gone", || {
        step.pids
            .iter()
            .all(|&p| proc_stat(p).is_none())
            .then_some(())
    });
    wait_for(T, "the allocation and its step to end cancelled", || {
        let s = gangctl_json(&c, &["job", &step.id.to_string()]).unwrap();
        let j = gangctl_json(&c, &["job", &alloc.to_string()]).unwrap();
        (s["state"] == "cancelled" && j["state"] == "cancelled").then_some(())
    });
    let _ = gangctl(&c, &["cancel", &a.id.to_string()]);
}

/// Ranks on pseudo-terminals (`prun -u --label`: every rank has one, in a session of its
/// own) are switched as any: beside a job in the other slice, they stop and run in turn.
#[test]
fn ranks_on_terminals_are_switched_as_any() {
    let _one = serial();
    let q = QUANTUM_MS.to_string();
    let c = cluster(2, 2, &["--mpl", "2", "--quantum-ms", &q]);
    let a = start_busy(&c, "2x2", 4);
    let dir = tempfile::tempdir().unwrap();
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "-u",
            "--label",
            "--detach",
            "--",
            "sh",
            "-c",
            &busy_script(dir.path()),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let b = Job {
        id,
        pids: rank_pids(dir.path(), 4, T),
    };
    for &pid in &b.pids {
        let out = std::fs::read_link(format!("/proc/{pid}/fd/1")).unwrap();
        assert!(out.starts_with("/dev/pts"), "rank {pid}'s stdout: {out:?}");
    }
    wait_switching(&a, &b);
    let w = watch(&a, &b, Duration::from_secs(3));
    eprintln!(
        "pty job: samples {}, overlapping {} (longest {:?}), turns {}",
        w.samples, w.overlap_intervals, w.longest_overlap, w.turns
    );
    assert!(w.turns >= 15, "they do not alternate: {} turns", w.turns);
    assert!(
        w.longest_overlap < Duration::from_millis(QUANTUM_MS / 4),
        "the pty job ran with the other for {:?}",
        w.longest_overlap
    );
    for id in [a.id, b.id] {
        assert!(gangctl(&c, &["cancel", &id.to_string()]).status.success());
    }
    wait_for(T, "the pty ranks to be gone", || {
        b.pids.iter().all(|&p| proc_stat(p).is_none()).then_some(())
    });
}
