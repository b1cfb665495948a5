//! What jobs and the machine look like to users (issue #12, part C), through the real
//! `prun` and `gangctl` on real local clusters: pending reasons, the asked shape and the
//! time limit, the TIMEOUT state and Slurm's time formats, counts rounded up (and
//! `--exact`), `gangctl jobs` filters, drain/resume of several nodes, the address file of
//! `gangctl start`, and slices numbered 0..MPL-1 with short table versions.
//!
//! Like `local_cluster.rs`, these need `gang-master` and `gang-agent` built next to the
//! commands (`cargo build -p gang-master -p gang-agent`), and say so and pass otherwise.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::*;

#[test]
fn queued_jobs_say_why_they_wait_and_jobs_can_be_picked_out() {
    let Some(c) = cluster((2, 2), 1) else { return };

    // Several nodes at once, in every form: ranges, (X,Y), X,Y; each reported.
    let o = run(GANGCTL, &c, &["drain", "0-1,1", "(1,0)"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "node 0,1: drained\nnode 1,1: drained\nnode 1,0: drained\n"
    );
    let back = json(&c, &["resume", "0-1,1"]);
    assert_eq!(back.as_array().map(Vec::len), Some(2), "{back}");
    assert!(
        back.as_array().unwrap().iter().all(|n| n["state"] == "up"),
        "{back}"
    );
    let o = run(GANGCTL, &c, &["drain", "5,5", "0,1"]);
    assert_eq!(o.status.code(), Some(1), "a node off the mesh is an error");
    assert!(text(&o.stderr).contains("node 5,5"), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "node 0,1: drained\n", "the others go on");
    json(&c, &["resume", "0,1"]);

    // Only the drained node keeps a 4-node job out: it says which, with what was asked.
    let a = detach(&c, &["-n", "4", "-t", "5min", "--", "sleep", "60"]);
    let j = wait_job(&c, a, "waiting", |j| j["pending_reason"] != "");
    assert_eq!(j["state"], "queued", "{j}");
    assert_eq!(
        j["pending_reason"], "waiting for node (1,0): drained",
        "{j}"
    );
    assert_eq!(
        (&j["asked"], &j["time_limit_s"]),
        (&"4".into(), &300.into()),
        "{j}"
    );
    let o = run(GANGCTL, &c, &["job", &a.to_string()]);
    let t = text(&o.stdout);
    assert!(
        t.contains("pending:    waiting for node (1,0): drained\n"),
        "{t}"
    );
    assert!(t.contains("time limit: 5:00 (300 s)\n"), "{t}");

    // Back in service: it runs; the next job is next in line with nothing free
    // (resources), the one after it waits behind it (priority).
    json(&c, &["resume", "1,0"]);
    wait_job(&c, a, "running", |j| j["state"] == "running");
    let b = detach(&c, &["-n", "1x1", "--", "sleep", "60"]);
    let d = detach(&c, &["-n", "1", "--", "sleep", "60"]);
    wait_job(&c, b, "resources", |j| j["pending_reason"] == "resources");
    wait_job(&c, d, "priority", |j| j["pending_reason"] == "priority");
    let o = run(GANGCTL, &c, &["jobs"]);
    let t = text(&o.stdout);
    assert!(t.lines().next().unwrap().contains("ASKED"), "{t}");
    assert!(t.contains("(resources)") && t.contains("(priority)"), "{t}");
    assert!(t.contains("5:00"), "the time limit: {t}");

    // Cancelling the running job starts the queued ones.
    json(&c, &["cancel", &a.to_string()]);
    wait_job(&c, d, "running", |j| j["state"] == "running");
    wait_job(&c, b, "running", |j| j["state"] == "running");
    assert_eq!(job(&c, b)["pending_reason"], "");

    // Filters.
    let user = job(&c, a)["user"].as_str().unwrap().to_string();
    let all = |args: &[&str]| ids(&json(&c, &[&["jobs"][..], args].concat()));
    assert_eq!(all(&[]), [d, b], "live jobs only by default");
    assert_eq!(all(&[&a.to_string()]), [a], "an id shows a finished job");
    assert_eq!(all(&[&format!("{a}-{d}")]), [d, b, a]);
    assert_eq!(all(&[&format!("{a},{d}")]), [d, a]);
    assert_eq!(all(&["last"]), [d]);
    assert_eq!(all(&["--state", "cancelled"]), [a]);
    assert_eq!(all(&["--state", "R,CA"]), [d, b, a]);
    assert_eq!(all(&["--user", &user, "--all"]), [d, b, a]);
    assert_eq!(all(&["--user", "no-such-user", "--all"]), Vec::<u64>::new());
    assert_eq!(all(&["--since", "1h"]), [d, b, a]);
    assert_eq!(all(&["--since", "2000-01-01"]), [d, b, a]);
    assert_eq!(all(&["--since", "2999-01-01T00:00Z"]), Vec::<u64>::new());
    let o = run(GANGCTL, &c, &["jobs", "999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("999"), "{}", text(&o.stderr));
    let o = run(GANGCTL, &c, &["jobs", "--state", "runing"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("unknown job state \"runing\": expected queued (PD)"),
        "{}",
        text(&o.stderr)
    );
    let o = run(GANGCTL, &c, &["jobs", "9-3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("write 3-9"), "{}", text(&o.stderr));

    // Cancel as scancel: something must be named; --state and --user pick among the
    // active jobs; a range skips what has ended.
    let f = detach(&c, &["-n", "4", "--", "sleep", "60"]);
    let g = detach(&c, &["-n", "4", "--", "sleep", "60"]);
    for (args, want) in [
        (&["cancel"][..], "name the jobs to cancel"),
        (&["cancel", "--state", "CD"], "a completed job has ended"),
        (&["cancel", "last"], "name the job to cancel by its id"),
    ] {
        let o = run(GANGCTL, &c, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(text(&o.stderr).contains(want), "{}", text(&o.stderr));
    }
    let o = run(GANGCTL, &c, &["cancel", "--user", "no-such-user"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    assert!(text(&o.stderr).contains("no active job matched"));
    let o = run(GANGCTL, &c, &["cancel", "--state", "PD", "--user", &user]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("cancelled {f}\ncancelled {g}\n"));
    assert_eq!(all(&[]), [d, b], "the running ones are left");

    // prun says why its job waits, then when it starts.
    let mut waiting = cmd(PRUN, &c)
        .args(["-n", "4", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let err = waiting.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let _ = tx.send(l.unwrap());
        }
    });
    let next_line = || {
        lines
            .recv_timeout(T)
            .expect("prun said nothing within the deadline")
    };
    let said = next_line();
    let e = ids(&json(&c, &["jobs", "last"]))[0];
    assert_eq!(said, format!("prun: job {e} queued: resources"));
    let o = run(GANGCTL, &c, &["cancel", &format!("{a}-{d}")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        format!(
            "cancelling {b}: its ranks are being stopped\ncancelling {d}: its ranks are being stopped\n"
        ),
        "{a} has ended: skipped"
    );
    assert_eq!(next_line(), format!("prun: job {e} started on 2x2@(0,0)"));
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(s) = waiting.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "prun did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    c.shutdown().expect("clean shutdown");
}

#[test]
fn a_time_limit_ends_a_job_as_timeout_in_slurm_formats() {
    let Some(c) = cluster((2, 1), 1) else { return };
    // MM:SS: two seconds.
    let t0 = Instant::now();
    let o = run(PRUN, &c, &["-n", "1", "-t", "0:02", "--", "sleep", "60"]);
    assert_eq!(o.status.code(), Some(124), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("timed out: time limit of 2 s reached"),
        "{err}"
    );
    assert!(t0.elapsed() < T);
    let last = json(&c, &["jobs", "last"]);
    assert_eq!(last[0]["state"], "timeout", "{last}");
    assert_eq!(last[0]["exit_code"], 124, "as prun exits: {last}");
    assert_eq!(last[0]["time_limit_s"], 2, "{last}");
    assert_eq!(ids(&json(&c, &["jobs", "--state", "TO"])).len(), 1);
    let o = run(GANGCTL, &c, &["jobs", "--all"]);
    assert!(text(&o.stdout).contains(" timeout "), "{}", text(&o.stdout));

    // Every form is taken (detached and cancelled), and refused forms name the accepted.
    for (form, secs) in [
        ("90", 5400),
        ("1:30:00", 5400),
        ("1-12", 129_600),
        ("1-00:00:30", 86_430),
        ("90s", 90),
        ("5min", 300),
        ("2h", 7200),
    ] {
        let id = detach(&c, &["-n", "1", "-t", form, "--", "sleep", "60"]);
        assert_eq!(job(&c, id)["time_limit_s"], secs, "{form}");
        json(&c, &["cancel", &id.to_string()]);
    }
    let o = run(PRUN, &c, &["-n", "1", "-t", "1:2:3:4", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("expected a duration: MM, MM:SS, HH:MM:SS, D-HH"),
        "{}",
        text(&o.stderr)
    );
    c.shutdown().expect("clean shutdown");
}

#[test]
fn a_count_rounded_up_is_said_or_refused() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let o = run(PRUN, &c, &["-n", "3", "--exact", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        "prun: 3 nodes asked; jobs are rectangles, so 3 would run on 4 (2x2); drop --exact to accept\n"
    );
    assert_eq!(
        ids(&json(&c, &["jobs", "--all"])).len(),
        0,
        "nothing submitted"
    );

    let o = run(PRUN, &c, &["-n", "3", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("prun: 3 nodes asked; jobs are rectangles, so job ")
            && err.ends_with(" runs on 4 (2x2); --exact refuses this\n"),
        "{err}"
    );
    let last = json(&c, &["jobs", "last"]);
    assert_eq!(
        (&last[0]["asked"], &last[0]["shape"]),
        (&"3".into(), &"2x2".into())
    );

    // A count that is a rectangle, or a shape: nothing said.
    for n in ["2", "1x2"] {
        let o = run(PRUN, &c, &["-n", n, "--exact", "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(text(&o.stderr), "", "-n {n}");
    }
    c.shutdown().expect("clean shutdown");
}

/// Two local clusters of one user: each has its own record, the newest live one is the
/// default, and stopping one leaves the other reachable.
#[test]
fn gangctl_start_leaves_its_address_for_other_shells() {
    if !built() {
        return;
    }
    let runtime = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let config = tempfile::NamedTempFile::new().unwrap();
    let records = runtime.path().join("gang/clusters");
    let client = |args: &[&str]| {
        Command::new(GANGCTL)
            .args(args)
            .env_remove("GANG_MASTER")
            .env_remove("GANG_OUTPUT")
            .env("GANG_CONFIG", config.path())
            .env("XDG_RUNTIME_DIR", runtime.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Which cluster answers with nothing set: told apart by their mesh widths; and what
    // was said of it on stderr (stdout is the JSON alone).
    let default_mesh_w = || {
        let o = client(&["--output", "json", "nodes"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let nodes: Value = serde_json::from_slice(&o.stdout).unwrap();
        (nodes["mesh_w"].as_u64().unwrap(), text(&o.stderr))
    };
    let start = |mesh: &str| {
        let mut child = Command::new(GANGCTL)
            .args(["start", "--mesh", mesh])
            .env_remove("GANG_MASTER")
            .env("TMPDIR", tmp.path())
            .env("XDG_RUNTIME_DIR", runtime.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The export line is the only thing on stdout.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("export GANG_MASTER=")
            .unwrap_or_else(|| panic!("stdout: {line:?}"))
            .to_string();
        (child, addr)
    };
    let stop = |child: &mut std::process::Child| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + T;
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "gangctl start did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let (mut first, first_addr) = start("1x1");
    let record = records.join(first.id().to_string());
    let kept = std::fs::read_to_string(&record).unwrap();
    assert_eq!(kept.lines().next(), Some(first_addr.as_str()), "{kept}");
    let mode = std::fs::metadata(&record).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Nothing set, no master in the config: the record names it, and so does gangctl.
    let (w, said) = default_mesh_w();
    assert_eq!(w, 1);
    let note = format!(
        "gangctl: using the local cluster in {}/gang-cluster-",
        tmp.path().display()
    );
    assert!(said.starts_with(&note), "{said}");
    assert!(
        said.ends_with(&format!("(gangctl start, pid {}, 1x1)\n", first.id())),
        "{said}"
    );
    // Named, it is not said.
    let o = client(&["--master", &first_addr, "nodes"]);
    assert_eq!(text(&o.stderr), "");

    // A second cluster is the default while it runs; stopping it leaves the first.
    let (mut second, second_addr) = start("2x1");
    assert_ne!(first_addr, second_addr);
    let (w, said) = default_mesh_w();
    assert_eq!(w, 2, "the newest is the default");
    assert!(
        said.ends_with(&format!(
            "(gangctl start, pid {}, 2x1); 2 are running: choose with --master or GANG_MASTER\n",
            second.id()
        )),
        "{said}"
    );
    // prun says it too.
    let o = Command::new(PRUN)
        .args(["-n", "1", "--", "true"])
        .env_remove("GANG_MASTER")
        .env("GANG_CONFIG", config.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).starts_with("prun: using the local cluster in "),
        "{}",
        text(&o.stderr)
    );
    stop(&mut second);
    assert!(!records.join(second.id().to_string()).exists());
    assert_eq!(default_mesh_w().0, 1, "the first is still reachable");
    stop(&mut first);
    assert!(!record.exists(), "removed when the cluster stops");

    // A record left by a gangctl that is gone (SIGKILLed) is not trusted, and is swept.
    let stale = records.join("999999999");
    std::fs::write(
        &stale,
        format!("{first_addr}\npid=999999999\nstarted_ns=1\n"),
    )
    .unwrap();
    let o = client(&["nodes"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("unix:/run/gang/master.sock"),
        "the default, not the stale address: {}",
        text(&o.stderr)
    );
    assert!(!stale.exists());
}

#[test]
fn slices_are_numbered_from_zero_and_tables_counted() {
    let Some(c) = cluster((2, 2), 2) else { return };
    let a = detach(&c, &["-n", "2x2", "--", "sleep", "60"]);
    let b = detach(&c, &["-n", "2x2", "--", "sleep", "60"]);
    wait_job(&c, b, "running", |j| j["state"] == "running");
    // Slices open and close: the master's ids climb, the rows people see do not.
    json(&c, &["cancel", &a.to_string()]);
    wait_job(&c, a, "cancelled", |j| j["state"] == "cancelled");
    let d = detach(&c, &["-n", "2x2", "--", "sleep", "60"]);
    wait_job(&c, d, "running", |j| j["state"] == "running");
    let deadline = Instant::now() + T;
    let mut m = loop {
        let m = json(&c, &["slices"]);
        if m["table_seq"].as_u64() > Some(0) && m["row_slices"].as_array().unwrap().len() == 2 {
            break m;
        }
        assert!(Instant::now() < deadline, "no table of two rows: {m}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let slice_ids: Vec<u64> = m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    assert!(slice_ids.iter().any(|&s| s >= 2), "ids climbed: {m}");
    assert!(m["table_seq"].as_u64().unwrap() < 100, "{m}");
    // The text and the JSON read at one table: a newer one may be published between two
    // reads (the same slices, a new version), so read until the JSON is the same before
    // and after the text.
    let (m, t) = loop {
        let t = text(&run(GANGCTL, &c, &["slices"]).stdout);
        let after = json(&c, &["slices"]);
        if after["table_seq"] == m["table_seq"] {
            break (after, t);
        }
        assert!(
            Instant::now() < deadline,
            "the table kept changing: {after}"
        );
        m = after;
    };
    assert!(
        t.contains("slice 0 (1 job)") && t.contains("slice 1 (1 job)"),
        "{t}"
    );
    assert!(!t.contains("slice 2"), "{t}");
    let table = t.lines().nth(1).unwrap();
    let v = table
        .strip_prefix("table v")
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("{t}"));
    assert_eq!(v, m["table_seq"].to_string(), "{t}");
    assert!(
        table.contains("rows: slice 0, 1") || table.contains("rows: slice 1, 0"),
        "{t}"
    );
    let o = run(GANGCTL, &c, &["nodes"]);
    assert!(text(&o.stdout).contains(" v"), "{}", text(&o.stdout));
    // Jobs name their slices the same way (the ids stay in the JSON).
    let jd = job(&c, d);
    let place = m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["placements"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["job"] == d)
        })
        .map(|s| (s["id"].clone(), s["row"].clone()))
        .unwrap();
    assert_eq!(
        (&jd["slices"][0], &jd["slice_rows"][0]),
        (&place.0, &place.1),
        "{jd}"
    );
    let o = run(GANGCTL, &c, &["job", &d.to_string()]);
    let t = text(&o.stdout);
    assert!(t.contains(&format!("slices:     {}\n", place.1)), "{t}");
    json(&c, &["cancel", &b.to_string(), &d.to_string()]);
    c.shutdown().expect("clean shutdown");
}
