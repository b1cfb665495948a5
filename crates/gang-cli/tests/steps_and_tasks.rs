//! Steps and array tasks named as Slurm names them, through the real `gangctl` and `prun`
//! on a real local cluster: a batch job's steps as `N.S` in `jobs`, `job`, `acct` (with
//! `-X`, `-j`, sacct's CPUTime, MaxRSSNode and `%N` widths) and `output`; an array's
//! waiting tasks on one compact line `N_[...%4]`, a range of tasks held, released and
//! cancelled by index; and references that name nothing refused with what there is.
//!
//! Like `local_cluster.rs`, these need `gang-master` and `gang-agent` built next to the
//! commands, and say so and pass otherwise.

mod common;

use common::*;
use gang_local::LocalCluster;
use serde_json::Value;

#[test]
fn a_batch_jobs_steps_are_named_alloc_dot_step_everywhere() {
    let Some(c) = cluster((2, 2), 1) else { return };
    // The script's output file (gang-%j.out) goes there, not into the source tree.
    let dir = tempfile::tempdir().unwrap();
    let id = submitted(cmd_p(GANGCTL, &c).current_dir(dir.path()).args([
        "submit",
        "-N",
        "1",
        "--parsable",
        "--wrap",
        "prun -- echo zero; prun -- sh -c 'echo one; exit 3'; prun -- echo two",
    ]));
    let j = wait_job(&c, id, "completed", |j| j["state"] == "completed");
    assert_eq!(j["step_ids"], serde_json::json!([id + 1, id + 2, id + 3]));
    let (s0, s1, s2) = (format!("{id}.0"), format!("{id}.1"), format!("{id}.2"));

    // squeue: the steps under their allocation, named N.S.
    let t = ok(&c, &["jobs", "--all"]);
    let names = first_cells(&t);
    let at = names.iter().position(|n| *n == id.to_string()).expect(&t);
    assert_eq!(
        names[at..at + 4],
        [id.to_string(), s0.clone(), s1.clone(), s2.clone()],
        "{t}"
    );

    // sacct: the allocation followed by its steps, whether listed or named; -X without.
    let want = [
        [id.to_string(), "completed".into(), "0".into()],
        [s0.clone(), "completed".into(), "0".into()],
        [s1.clone(), "failed".into(), "3".into()],
        [s2.clone(), "completed".into(), "0".into()],
    ];
    for args in [
        &["acct", "-o", "jobid,state,exitcode"][..],
        &["acct", &id.to_string(), "-o", "JobID,State,ExitCode"],
    ] {
        let t = ok(&c, args);
        let r: Vec<Vec<String>> = rows(&t)
            .into_iter()
            .filter(|r| r[0].starts_with(&id.to_string()))
            .collect();
        assert_eq!(r, want, "{args:?}: {t}");
    }
    let t = ok(
        &c,
        &["acct", "-X", "-j", &id.to_string(), "-o", "jobid,state"],
    );
    assert_eq!(rows(&t), [[id.to_string(), "completed".to_string()]], "{t}");
    let t = ok(&c, &["acct", "-j", &s1, "-o", "jobid,state,exitcode"]);
    assert_eq!(rows(&t), [[s1.clone(), "failed".into(), "3".into()]], "{t}");

    // sacct's fields and widths: CPUTime (1 node), MaxRSSNode (the step's one node, if
    // its usage was measured), State%20 right justified.
    let acct = json(&c, &["acct", "-j", &s1]);
    let row = &acct[0];
    assert_eq!(
        (&row["jobid"], &row["job_id"], &row["parent"], &row["step"]),
        (&(id + 2).into(), &s1.clone().into(), &id.into(), &1.into()),
        "{row}"
    );
    let step = job(&c, id + 2);
    let node = format!("{},{}", step["submesh"]["x"], step["submesh"]["y"]);
    let t = ok(
        &c,
        &["acct", "-j", &s1, "-o", "JobID,CPUTime,MaxRSSNode,State%20"],
    );
    let line = t.lines().nth(1).unwrap_or_default().to_string();
    assert!(line.ends_with(&format!("{:>20}", "failed")), "{t}");
    let cells = rows(&t)[0].clone();
    assert_eq!(
        cells[1],
        fmt_secs(row["cputime_ms"].as_u64().unwrap() / 1000),
        "{t}"
    );
    let measured = !row["maxrss_bytes"].is_null();
    assert_eq!(cells[2], if measured { node } else { "-".into() }, "{t}");
    assert!(t.starts_with("JOBID"), "{t}");
    assert!(
        t.lines().next().unwrap().ends_with("               STATE"),
        "{t}"
    );

    // scontrol show job, sattach's output, squeue -j: the step by its name.
    let t = ok(&c, &["job", &s1]);
    assert!(
        t.starts_with(&format!("id:         {s1} (job {})\n", id + 2)),
        "{t}"
    );
    assert!(t.contains("exit code:  3\n"), "{t}");
    assert_eq!(job(&c, id + 2)["parent"], id);
    assert_eq!(ok(&c, &["output", &s1]), "one\n");
    let v = json(&c, &["jobs", &s1]);
    assert_eq!(
        (&v[0]["job_id"], &v[0]["parent"], &v[0]["step"]),
        (&s1.clone().into(), &id.into(), &1.into())
    );

    // `last`: the newest job that is not a step, for `job` as for `jobs`.
    assert_eq!(json(&c, &["job", "last"])["id"], id);
    assert_eq!(ids(&json(&c, &["jobs", "last"])), [id]);

    // What names nothing says what there is.
    for (args, code, want) in [
        (
            vec!["job".to_string(), format!("{id}.5")],
            1,
            format!("allocation {id} has steps {id}.0-{id}.2; there is no {id}.5"),
        ),
        (
            vec!["acct".into(), "-j".into(), format!("{}.0", id + 1)],
            1,
            format!("job {} is not an allocation: it has no steps", id + 1),
        ),
        (
            vec!["cancel".into(), format!("{id}_1")],
            1,
            format!("job {id} is not an array"),
        ),
        (
            vec!["job".into(), format!("{id}-{}", id + 1)],
            2,
            "name one job: ID, ID.STEP, ID_TASK or `last`".into(),
        ),
        (
            vec!["output".into(), format!("{id}.x")],
            2,
            "expected job ids as ID, FIRST-LAST, ID.STEP".into(),
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, err) = refused(&c, &args);
        assert_eq!(got, Some(code), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    c.shutdown().expect("clean shutdown");
}

/// Seconds as sacct prints a duration below a day.
fn fmt_secs(s: u64) -> String {
    format!("{:02}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
}

/// `gangctl jobs` as JSON, the objects of array `a`.
fn array_lines(c: &LocalCluster, a: u64) -> Vec<Value> {
    json(c, &["jobs"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["array_job_id"] == a)
        .cloned()
        .collect()
}

#[test]
fn an_arrays_waiting_tasks_are_one_line_and_ranges_of_tasks_are_named_by_index() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let o = run(
        PRUN,
        &c,
        &[
            "-d", "-n", "1", "-H", "--array", "1-20%4", "--", "sleep", "60",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let a: u64 = text(&o.stdout).trim().parse().unwrap();
    let user = job(&c, a)["user"].as_str().unwrap().to_string();

    // Held, all twenty wait together: one line.
    let t = ok(&c, &["jobs"]);
    assert_eq!(first_cells(&t), [format!("{a}_[1-20%4]")], "{t}");
    assert!(
        t.contains(&format!("(held by {user} (gangctl release {a}_[1-20]))")),
        "{t}"
    );
    let lines = array_lines(&c, a);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["array_throttle"], 4);
    assert_eq!(
        lines[0]["array_task_ids"],
        serde_json::json!((1..=20).collect::<Vec<u32>>())
    );
    assert_eq!(lines[0]["task_job_ids"][19], a + 19);

    // Tasks 1-8 released: four run (the array's limit), four wait for them, the rest
    // stay held: two compact lines and a line per running task.
    let out = ok(&c, &["release", &format!("{a}_[1-8]")]);
    let released: Vec<String> = (1..=8).map(|t| format!("released {a}_{t}")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), released);
    for id in a..a + 4 {
        wait_job(&c, id, "running", |j| j["state"] == "running");
    }
    let t = ok(&c, &["jobs"]);
    let mut names = first_cells(&t);
    names.sort();
    let mut want: Vec<String> = (1..=4).map(|t| format!("{a}_{t}")).collect();
    want.extend([format!("{a}_[5-8%4]"), format!("{a}_[9-20%4]")]);
    want.sort();
    assert_eq!(names, want, "{t}");
    assert!(
        t.contains(&format!("(array {a} runs at most 4 tasks at once)")),
        "{t}"
    );

    // A range of tasks cancels those and no other; a task is shown by its index.
    let out = ok(&c, &["cancel", &format!("{a}_[10-20]")]);
    let cancelled: Vec<String> = (10..=20).map(|t| format!("cancelled {a}_{t}")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), cancelled);
    let all = json(&c, &["jobs", "--all", &format!("{a}-{}", a + 19)]);
    let mut states: Vec<(u64, String)> = all
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| match j["task_job_ids"].as_array() {
            Some(ids) => ids
                .iter()
                .map(|i| {
                    (
                        i.as_u64().unwrap(),
                        j["state"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            None => vec![(
                j["id"].as_u64().unwrap(),
                j["state"].as_str().unwrap().to_string(),
            )],
        })
        .collect();
    states.sort();
    for (id, state) in &states {
        let task = id - a + 1;
        let want = match task {
            1..=4 => "running",
            5..=9 => "queued",
            _ => "cancelled",
        };
        assert_eq!(state, want, "task {task}: {all}");
    }
    assert_eq!(states.len(), 20, "{all}");
    let t = ok(&c, &["job", &format!("{a}_9")]);
    assert!(
        t.starts_with(&format!("id:         {a}_9 (job {})\n", a + 8)),
        "{t}"
    );
    let t = ok(&c, &["job", &a.to_string()]);
    assert!(
        t.contains(&format!("(its tasks: {a}_[1-20], at most 4 at once)")),
        "{t}"
    );

    // What names nothing says what there is.
    for (args, code, want) in [
        (
            vec!["job".to_string(), format!("{a}_30")],
            1,
            format!("array {a} has tasks 1-20; there is no task 30"),
        ),
        (
            vec!["cancel".into(), format!("{a}_[30-40]")],
            1,
            format!("array {a} has tasks 1-20; none is in 30-40"),
        ),
        (
            vec!["jobs".into(), format!("{}_1", a + 1)],
            1,
            format!(
                "job {} is not an array: it is task {a}_2 of array {a}",
                a + 1
            ),
        ),
        (
            vec!["cancel".into(), format!("{a}_[1-3")],
            2,
            "a `[` without its `]`".into(),
        ),
        (
            vec!["hold".into(), format!("{a}_1-3")],
            2,
            format!("write {a}_[1-3]"),
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, err) = refused(&c, &args);
        assert_eq!(got, Some(code), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    ok(&c, &["cancel", &format!("{a}_[1-20]")]);
    c.shutdown().expect("clean shutdown");
}
