//! Slurm users' everyday work, through the real `prun` and `gangctl` on a real local
//! cluster: held jobs and release, dependencies (one that can never hold ends the job),
//! job arrays with their limit, `GANG_ARRAY_TASK_ID` and `%A_%a` output files, and
//! `gangctl update` of a time limit and name.
//!
//! Like `local_cluster.rs`, these need `gang-master` and `gang-agent` built next to the
//! commands, and say so and pass otherwise.

mod common;

use std::time::Instant;

use common::*;

#[test]
fn holds_dependencies_arrays_and_updates() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();

    // Held: it waits, saying who holds it; the jobs after it wait on it.
    let a = detach(&c, &["-n", "2x2", "--hold", "-D", d, "--", "true"]);
    let dep = format!("afterok:{a}");
    let b = detach(
        &c,
        &[
            "-n",
            "1",
            "--dependency",
            &dep,
            "-D",
            d,
            "--",
            "touch",
            "b-ran",
        ],
    );
    let notok = format!("afternotok:{a}");
    let x = detach(&c, &["-N1", &format!("--dependency={notok}"), "--", "true"]);
    let j = wait_job(&c, a, "held", |j| j["pending_reason"] != "");
    assert_eq!(j["held_by"], j["user"], "{j}");
    assert_eq!(
        j["pending_reason"],
        format!(
            "held by {} (gangctl release {a})",
            j["user"].as_str().unwrap()
        )
    );
    let jb = job(&c, b);
    assert_eq!(jb["dependency"], dep, "{jb}");
    assert_eq!(
        jb["pending_reason"],
        format!("dependency {dep}: job {a} is queued")
    );
    let o = run(GANGCTL, &c, &["job", &a.to_string()]);
    assert!(text(&o.stdout).contains("held by:"), "{}", text(&o.stdout));
    let o = run(GANGCTL, &c, &["jobs"]);
    assert!(text(&o.stdout).contains("(held by "), "{}", text(&o.stdout));

    // Released: it runs and completes; what waited on its success runs, what waited on
    // its failure can never run and ends saying why.
    let o = run(GANGCTL, &c, &["release", &a.to_string()]);
    assert_eq!(
        text(&o.stdout),
        format!("released {a}\n"),
        "{}",
        text(&o.stderr)
    );
    wait_job(&c, a, "completed", |j| j["state"] == "completed");
    wait_job(&c, b, "completed", |j| j["state"] == "completed");
    assert!(dir.path().join("b-ran").exists());
    let jx = wait_job(&c, x, "cancelled", |j| j["state"] == "cancelled");
    assert_eq!(
        jx["reason"],
        format!("dependency {notok} can never be met: job {a} completed")
    );

    // An array of 4 tasks, 2 at a time, each writing its index to its own file.
    let o = cmd(PRUN, &c)
        .args([
            "-d",
            "-n",
            "1",
            "--array",
            "1-4%2",
            "-D",
            d,
            "-o",
            "out-%A_%a.txt",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "echo task $GANG_ARRAY_TASK_ID of $GANG_ARRAY_TASK_COUNT",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let first: u64 = text(&o.stdout).trim().parse().unwrap();
    assert_eq!(
        text(&o.stderr),
        format!(
            "prun: array {first} of 4 tasks: jobs {first}-{}\n",
            first + 3
        )
    );
    for (i, id) in (first..first + 4).enumerate() {
        let t = wait_job(&c, id, "completed", |j| j["state"] == "completed");
        assert_eq!(
            (t["array_job_id"].as_u64(), t["array_task_id"].as_u64()),
            (Some(first), Some(i as u64 + 1))
        );
        let file = dir.path().join(format!("out-{first}_{}.txt", i + 1));
        let said = std::fs::read_to_string(&file).unwrap();
        assert_eq!(said, format!("task {} of 4\n", i + 1));
    }
    let o = run(PRUN, &c, &["-n", "1", "--array", "1-3", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "an array needs --detach");
    assert!(text(&o.stderr).contains("--detach"), "{}", text(&o.stderr));

    // A running job's time limit lowered and name changed.
    let r = detach(&c, &["-n", "1", "-t", "10m", "--", "sleep", "60"]);
    wait_job(&c, r, "running", |j| j["state"] == "running");
    let o = run(
        GANGCTL,
        &c,
        &["update", &r.to_string(), "-t", "5m", "--name", "renamed"],
    );
    assert_eq!(
        text(&o.stdout),
        format!("updated {r}\n"),
        "{}",
        text(&o.stderr)
    );
    let jr = job(&c, r);
    assert_eq!(
        (jr["time_limit_s"].as_u64(), jr["name"].as_str()),
        (Some(300), Some("renamed"))
    );
    let o = run(GANGCTL, &c, &["hold", &r.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains(&format!(
            "job {r} is running: only a queued job can be held"
        )),
        "{}",
        text(&o.stderr)
    );
    let o = run(GANGCTL, &c, &["update", &r.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("nothing to change"));
    let t0 = Instant::now();
    json(&c, &["cancel", &r.to_string()]);
    wait_job(&c, r, "cancelled", |j| j["state"] == "cancelled");
    assert!(t0.elapsed() < T);

    // Accounting, as sacct: the columns asked, oldest first; JSON has every column.
    let o = run(
        GANGCTL,
        &c,
        &[
            "acct",
            "-o",
            "JobID,State,ExitCode,NNodes,NodeList,Array",
            &format!("{a},{x},{first}"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<Vec<String>> = text(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        lines[0],
        ["JOBID", "STATE", "EXITCODE", "NNODES", "NODELIST", "ARRAY"]
    );
    assert_eq!(
        lines[1],
        [
            a.to_string(),
            "completed".into(),
            "0".into(),
            "4".into(),
            "0-1,0-1".into(),
            "-".into()
        ]
    );
    assert_eq!(
        lines[2][..4],
        [x.to_string(), "cancelled".into(), "-".into(), "0".into()]
    );
    assert_eq!(lines[3][5], format!("{first}_1"));
    let acct = json(&c, &["acct", &r.to_string()]);
    let row = &acct[0];
    assert_eq!(
        (row["jobid"].as_u64(), row["state"].as_str()),
        (Some(r), Some("cancelled"))
    );
    assert!(row["elapsed_ms"].as_i64().unwrap() > 0, "{row}");
    assert_eq!(row["timelimit_s"], 300, "{row}");
    // CPU time and memory, measured in each rank's cgroups: a job whose ranks burn CPU and
    // hold 64 MiB each.
    let burn = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; head -c 67108864 /dev/zero | sort >/dev/null";
    let o = run(PRUN, &c, &["-n", "2", "--", "sh", "-c", burn]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let acct = json(&c, &["acct", "last"]);
    let row = &acct[0];
    assert!(row["usercpu_ns"].as_u64().unwrap() > 20_000_000, "{row}");
    assert!(row["maxrss_bytes"].as_u64().unwrap() > 60 << 20, "{row}");
    let o = run(
        GANGCTL,
        &c,
        &["acct", "last", "-o", "jobid,totalcpu,maxrss"],
    );
    let line = text(&o.stdout).lines().nth(1).unwrap().to_string();
    assert!(line.ends_with('M'), "{line}");
    let id = row["jobid"].as_u64().unwrap().to_string();
    let o = run(GANGCTL, &c, &["job", &id]);
    assert!(
        text(&o.stdout).contains("(2 of 2 ranks measured)"),
        "{}",
        text(&o.stdout)
    );

    // Today's jobs by default (in every state), oldest first.
    let today: Vec<u64> = json(&c, &["acct"])
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobid"].as_u64().unwrap())
        .collect();
    assert!(today.contains(&r) && today.contains(&x), "{today:?}");
    assert!(today.windows(2).all(|w| w[0] < w[1]), "{today:?}");
    c.shutdown().expect("clean shutdown");
}
