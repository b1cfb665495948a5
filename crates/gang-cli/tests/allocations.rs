//! Allocations and steps through the real `gangctl` and `prun` on a real local cluster:
//! a batch script with `#GANG` directives whose prun lines run as steps on its nodes
//! (`gangctl submit`, sbatch), a command in an allocation (`gangctl alloc`, salloc) whose
//! steps wait for one another's nodes, the steps in `gangctl job` and `gangctl acct`, and
//! steps refused where they cannot run.
//!
//! Like `local_cluster.rs`, these need `gang-master` and `gang-agent` built next to the
//! commands, and say so and pass otherwise.

mod common;

use common::*;

#[test]
fn a_batch_script_runs_its_steps_on_its_nodes_and_shows_them() {
    let Some(c) = cluster((2, 2), 2) else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("job.sh"),
        "#!/bin/sh\n\
         #GANG -n 2x2 -t 10m\n\
         #GANG --job-name steps --output out-%j.txt\n\
         echo \"script on $GANG_NODE in allocation $GANG_ALLOCATION_ID with $1\"\n\
         prun -n 1x2 -- sh -c 'echo first $GANG_RANK on $GANG_NODE'\n\
         prun -- sh -c 'echo whole $GANG_RANK of $GANG_SIZE'\n\
         prun -n 1 -- sh -c 'exit 4' || echo \"third failed with $?\"\n\
         exit 0\n",
    )
    .unwrap();
    let o = cmd_p(GANGCTL, &c)
        .current_dir(d)
        .args(["submit", "job.sh", "input.dat"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let id: u64 = out
        .trim()
        .strip_prefix("submitted batch job ")
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    let j = wait_job(&c, id, "completed", |j| j["state"] == "completed");
    assert_eq!(j["name"], "steps");
    assert_eq!(j["allocation"], true);
    assert_eq!(j["time_limit_s"], 600);
    let steps: Vec<u64> = j["step_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(steps, vec![id + 1, id + 2, id + 3], "{j}");

    let log = std::fs::read_to_string(d.join(format!("out-{id}.txt"))).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "first 0 on 0,0",
            "first 1 on 0,1",
            "prun: rank 0 on node (0,0) exited with code 4",
            &format!("script on 0,0 in allocation {id} with input.dat"),
            "third failed with 4",
            "whole 0 of 4",
            "whole 1 of 4",
            "whole 2 of 4",
            "whole 3 of 4",
        ],
        "{log}"
    );

    // Each step is a job of its own in the allocation, numbered in it.
    let v = json(&c, &["job", &id.to_string()]);
    let st: Vec<(&str, &str, u64)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["state"].as_str().unwrap(),
                s["shape"].as_str().unwrap(),
                s["step"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        st,
        [
            ("completed", "1x2", 0),
            ("completed", "2x2", 1),
            ("failed", "1x1", 2)
        ],
        "{v}"
    );
    assert!(
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["allocation_id"] == id)
    );
    let o = run(GANGCTL, &c, &["job", &id.to_string()]);
    let t = text(&o.stdout);
    assert!(
        t.contains("command:    batch script steps, run by /bin/sh with input.dat"),
        "{t}"
    );
    assert!(t.contains("steps:      3"), "{t}");
    assert!(t.contains(&format!("{id}.2 ")), "{t}");
    let o = run(GANGCTL, &c, &["job", &(id + 1).to_string()]);
    assert!(text(&o.stdout).contains(&format!("step:       0 of allocation {id}")));

    // sacct's JOBID.STEP, with the steps' own accounting.
    let range = format!("{id}-{}", id + 3);
    let o = run(
        GANGCTL,
        &c,
        &["acct", &range, "-o", "jobid,state,exitcode,nnodes"],
    );
    let t = text(&o.stdout);
    let rows: Vec<Vec<&str>> = t
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec![id.to_string().as_str(), "completed", "0", "4"],
            vec![format!("{id}.0").as_str(), "completed", "0", "2"],
            vec![format!("{id}.1").as_str(), "completed", "0", "4"],
            vec![format!("{id}.2").as_str(), "failed", "4", "1"],
        ]
        .iter()
        .map(|r| r.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .collect::<Vec<_>>()
        .iter()
        .map(|r| r.iter().map(String::as_str).collect::<Vec<_>>())
        .collect::<Vec<_>>(),
        "{t}"
    );
}

#[test]
fn a_command_in_an_allocation_runs_steps_that_wait_for_each_others_nodes() {
    let Some(c) = cluster((2, 2), 1) else { return };
    // The first step holds both nodes for a while; the second, asked meanwhile, waits for
    // them instead of queueing for the mesh, and starts once the first has ended.
    let o = cmd_p(GANGCTL, &c)
        .args([
            "alloc",
            "-n",
            "2x1",
            "--",
            "sh",
            "-c",
            "prun -n 2x1 sleep 1 & sleep 0.3; prun -n 1 -- echo second; wait; \
             echo alloc=$GANG_ALLOCATION_ID; exit 3",
        ])
        .output()
        .unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{out}{err}");
    let id: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("alloc="))
        .unwrap_or_else(|| panic!("{out}{err}"))
        .parse()
        .unwrap();
    assert!(out.contains("second\n"), "{out}");
    assert!(
        err.contains(&format!("gangctl: granted allocation {id} on 2x1@(0,0)")),
        "{err}"
    );
    assert!(
        err.contains(&format!("gangctl: relinquished allocation {id}")),
        "{err}"
    );
    let j = job(&c, id);
    assert_eq!(j["state"], "failed", "{j}");
    assert_eq!(j["exit_code"], 3);
    assert_eq!(j["reason"], "the allocation's command exited with code 3");
    let (first, second) = (job(&c, id + 1), job(&c, id + 2));
    assert_eq!(first["argv"][0], "sleep", "{first}");
    assert!(
        second["start_ns"].as_i64().unwrap() >= first["end_ns"].as_i64().unwrap(),
        "the second step started before the first left its nodes: {first} {second}"
    );
}

#[test]
fn steps_are_refused_where_they_cannot_run() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let other = detach(&c, &["-n", "1", "--", "sleep", "30"]);
    let refused = |alloc: u64, args: &[&str]| {
        let o = cmd(PRUN, &c)
            .env("GANG_ALLOCATION_ID", alloc.to_string())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        text(&o.stderr)
    };
    let e = refused(other, &["-n", "1", "true"]);
    assert!(
        e.contains(&format!("job {other} is not an allocation")),
        "{e}"
    );
    let e = refused(9999, &["true"]);
    assert!(e.contains("there is no allocation 9999"), "{e}");
    let e = refused(other, &["-n", "1", "--hold", "true"]);
    assert!(
        e.contains("--array, --dependency and --hold are for jobs of their own"),
        "{e}"
    );
    // Outside an allocation a shape is needed; --allocation 0 leaves one.
    let o = cmd(PRUN, &c).arg("true").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = cmd(PRUN, &c)
        .env("GANG_ALLOCATION_ID", other.to_string())
        .args(["--allocation", "0", "-n", "1", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // A step larger than its allocation, named as such.
    let o = cmd_p(GANGCTL, &c)
        .args(["alloc", "-n", "1", "--", "prun", "-n", "2x2", "true"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("step asks 2x2 but allocation"), "{err}");
    assert!(err.contains("is 1x1"), "{err}");
    let _ = run(GANGCTL, &c, &["cancel", &other.to_string()]);
}
