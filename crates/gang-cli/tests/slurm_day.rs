//! A Slurm user's working day, replayed through the real `prun` and `gangctl` on a real
//! local cluster, every answer checked: a batch script (no node count: one node, as
//! sbatch) whose second step fails, looked at with sacct's habits by step; an allocation
//! with two steps (salloc); an array `1-20%4` with one failing task and a range of tasks
//! cancelled by index; a dependency chain; a job held, updated and released.
//!
//! Like `local_cluster.rs`, this needs `gang-master` and `gang-agent` built next to the
//! commands, and says so and passes otherwise.

mod common;

use std::path::Path;

use common::*;
use gang_local::LocalCluster;

/// sacct's JobID, State and ExitCode of `sel` (`acct -j SEL`), a row each.
fn acct(c: &LocalCluster, sel: &str) -> Vec<Vec<String>> {
    rows(&ok(c, &["acct", "-j", sel, "-o", "JobID,State,ExitCode"]))
}

fn row(cells: [&str; 3]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

/// Morning: a batch script ported from sbatch, its steps looked at one by one.
fn batch_with_a_failing_step(c: &LocalCluster, dir: &Path) {
    let script = dir.join("day.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#GANG -J day\nprun -- echo first\nprun -- sh -c 'echo broken >&2; exit 7'\nprun -- echo third\n",
    )
    .unwrap();
    let a = submitted(
        cmd_p(GANGCTL, c)
            .current_dir(dir)
            .args(["submit", "--parsable", "day.sh"]),
    );
    let j = wait_job(c, a, "completed", |j| j["state"] == "completed");
    assert_eq!(j["shape"], "1x1", "one node unless asked: {j}");
    let (s0, s1, s2) = (format!("{a}.0"), format!("{a}.1"), format!("{a}.2"));
    assert_eq!(
        acct(c, &a.to_string()),
        [
            row([&a.to_string(), "completed", "0"]),
            row([&s0, "completed", "0"]),
            row([&s1, "failed", "7"]),
            row([&s2, "completed", "0"]),
        ]
    );
    assert_eq!(acct(c, &s1), [row([&s1, "failed", "7"])]);
    let x = rows(&ok(c, &["acct", "-X", "-j", &a.to_string(), "-o", "JobID"]));
    assert_eq!(x, [vec![a.to_string()]]);
    assert_eq!(ok(c, &["output", &s0]), "first\n");
    let err = run(GANGCTL, c, &["output", &s1, "--stream", "stderr"]);
    assert!(
        text(&err.stdout).contains("broken"),
        "{}",
        text(&err.stdout)
    );
    let log = std::fs::read_to_string(dir.join(format!("gang-{a}.out"))).unwrap();
    assert!(log.contains("first") && log.contains("third"), "{log}");
}

/// An allocation (salloc) running two steps, the second on one of its two nodes.
fn allocation_with_two_steps(c: &LocalCluster) {
    let o = cmd_p(GANGCTL, c)
        .args([
            "alloc",
            "-N",
            "2",
            "sh",
            "-c",
            "prun -- echo step-a; prun -N 1 -- echo step-b",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_eq!(out.matches("step-a").count(), 2, "{out}");
    assert_eq!(out.matches("step-b").count(), 1, "{out}");
}

/// An array of 20, four at a time: task 7 fails, tasks 15-20 are cancelled while they
/// wait (named by index), the others complete.
fn array_with_a_failure_and_a_range_cancel(c: &LocalCluster, dir: &Path) {
    let a = submitted(cmd_p(PRUN, c).current_dir(dir).args([
        "-d",
        "-N",
        "1",
        "--array",
        "1-20%4",
        "--",
        "sh",
        "-c",
        "sleep 1; test \"$GANG_ARRAY_TASK_ID\" != 7",
    ]));
    // The waiting tasks are one line with the array's limit, as squeue shows them.
    let t = ok(c, &["jobs", &format!("{a}_[1-20]")]);
    assert!(
        first_cells(&t)
            .iter()
            .any(|n| n.starts_with(&format!("{a}_[")) && n.ends_with("%4]")),
        "{t}"
    );
    let out = ok(c, &["cancel", &format!("{a}_[15-20]")]);
    let want: Vec<String> = (15..=20).map(|t| format!("cancelled {a}_{t}")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    for id in a..a + 20 {
        wait_job(c, id, "ended", |j| {
            !["queued", "starting", "running"].contains(&j["state"].as_str().unwrap())
        });
    }
    let got = acct(c, &format!("{a}_[1-20]"));
    assert_eq!(got.len(), 20, "{got:?}");
    for (i, r) in got.iter().enumerate() {
        let task = i + 1;
        let want = match task {
            7 => row([&format!("{a}_7"), "failed", "1"]),
            15..=20 => row([&format!("{a}_{task}"), "cancelled", "-"]),
            _ => row([&format!("{a}_{task}"), "completed", "0"]),
        };
        if (15..=20).contains(&task) {
            assert_eq!(r[..2], want[..2], "task {task}: {got:?}");
        } else {
            assert_eq!(*r, want, "task {task}: {got:?}");
        }
    }
}

/// Three jobs, each after the one before: afterok, then afterany of a failure.
fn dependency_chain(c: &LocalCluster) {
    let x = detach(c, &["-N", "1", "--", "sleep", "1"]);
    let y = detach(
        c,
        &[
            "-N",
            "1",
            "--dependency",
            &format!("afterok:{x}"),
            "--",
            "false",
        ],
    );
    let z = detach(
        c,
        &[
            "-N",
            "1",
            "--dependency",
            &format!("afterany:{y}"),
            "--",
            "true",
        ],
    );
    let jz = wait_job(c, z, "completed", |j| j["state"] == "completed");
    let (jx, jy) = (job(c, x), job(c, y));
    assert_eq!(
        (&jx["state"], &jy["state"]),
        (&"completed".into(), &"failed".into())
    );
    let ns = |j: &serde_json::Value, k: &str| j[k].as_i64().unwrap();
    assert!(ns(&jy, "start_ns") >= ns(&jx, "end_ns"), "{jx}\n{jy}");
    assert!(ns(&jz, "start_ns") >= ns(&jy, "end_ns"), "{jy}\n{jz}");
}

/// A job held at submission, renamed and given a time limit while held, then released
/// by a range that also covers a queued job nobody holds (left alone, not refused).
fn hold_update_release(c: &LocalCluster) {
    let h = detach(c, &["-N", "1", "-H", "--", "echo", "was-held"]);
    let hs = h.to_string();
    let after = detach(
        c,
        &[
            "-N",
            "1",
            "--dependency",
            &format!("afterok:{h}"),
            "--",
            "true",
        ],
    );
    let h2 = detach(c, &["-N", "1", "-H", "--", "true"]);
    ok(c, &["update", &hs, "-t", "5", "--name", "renamed"]);
    let j = job(c, h);
    assert_eq!(j["state"], "queued", "{j}");
    let t = ok(c, &["job", &hs]);
    assert!(t.contains("renamed") && t.contains("held by"), "{t}");
    let o = run(GANGCTL, c, &["hold", &hs]);
    assert!(
        o.status.success(),
        "holding a held job: {}",
        text(&o.stderr)
    );
    assert_eq!(
        ok(c, &["release", &format!("{h}-{h2}")]),
        format!("released {hs}\nreleased {h2}\n")
    );
    for id in [h, after, h2] {
        wait_job(c, id, "completed", |j| j["state"] == "completed");
    }
    assert_eq!(ok(c, &["output", &hs]), "was-held\n");
    // A job no longer held has nothing to release; nor has a running one never held.
    let (code, err) = refused(c, &["release", &hs]);
    assert_eq!(code, Some(1), "{err}");
    let r = detach(c, &["-N", "1", "--", "sleep", "600"]);
    wait_job(c, r, "running", |j| j["state"] == "running");
    let (code, err) = refused(c, &["release", &r.to_string()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("never held: nothing to release"), "{err}");
    ok(c, &["cancel", &r.to_string()]);
}

#[test]
fn a_slurm_users_working_day() {
    let Some(c) = cluster((2, 2), 2) else { return };
    let dir = tempfile::tempdir().unwrap();
    batch_with_a_failing_step(&c, dir.path());
    allocation_with_two_steps(&c);
    array_with_a_failure_and_a_range_cancel(&c, dir.path());
    dependency_chain(&c);
    hold_update_release(&c);
    c.shutdown().expect("clean shutdown");
}
