//! A job's output from the CLI (`gangctl attach`, `gangctl output`, `prun --output/--error`)
//! and what `prun` says and does on its own (the failing rank's line, SIGHUP), through the
//! real binaries on a real loopback cluster.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::LocalCluster;
use gang_proto::v1;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Generous: the machine running the tests may be loaded.
const T: Duration = Duration::from_secs(60);

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn spawn(c: &LocalCluster, bin: &str, args: &[&str], cwd: Option<&Path>) -> Child {
    let mut cmd = Command::new(bin_dir().join(bin));
    gang_local::with_default_signals(&mut cmd);
    cmd.args(args)
        .env("GANG_MASTER", c.master_addr())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.spawn().expect("the binary runs")
}

/// Wait for a child with a deadline (killing it and failing past it).
fn wait_output(child: Child, what: &str) -> Output {
    let pid = Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            if kill(pid, None).is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        kill(pid, Signal::SIGKILL).is_ok()
    });
    let out = child.wait_with_output().expect("the child ends");
    assert!(
        !watchdog.join().unwrap_or(false),
        "{what} did not end within {T:?}; stderr: {}",
        stderr(&out)
    );
    out
}

#[test]
fn gangctl_attach_and_output_read_a_detached_job() {
    let c = cluster(2, 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    // Rank 1 fails only once rank 0 is done, so that rank 0's last line is not cut off
    // by the teardown of the failed job.
    let script = format!(
        "echo out $GANG_RANK; echo err $GANG_RANK >&2; \
         while [ ! -e {g} ]; do sleep 0.05; done; echo after $GANG_RANK; \
         [ $GANG_RANK = 0 ] && {{ touch {g}.0; exit 0; }}; \
         while [ ! -e {g}.0 ]; do sleep 0.05; done; exit 3",
        g = gate.display()
    );
    let id = submit(&c, "2", &["sh", "-c", &script]);
    let ids = id.to_string();

    // While it runs: what it wrote so far, and gangctl returns.
    let so_far = wait_for(T, "both ranks' first lines in gangctl output", || {
        let o = gangctl(&c, &["output", &ids]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        (text.contains("out 0\n") && text.contains("out 1\n")).then_some(o)
    });
    assert!(!stdout(&so_far).contains("err "), "stderr stays on stderr");
    assert!(stderr(&so_far).contains("err 1\n"), "{}", stderr(&so_far));
    let o = gangctl(&c, &["output", &ids, "--rank", "1", "--stream", "stderr"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "err 1\n");
    let o = gangctl(&c, &["output", &ids, "--rank", "0", "--label"]);
    assert_eq!(stdout(&o), "0: out 0\n", "{}", stderr(&o));
    assert_eq!(stderr(&o), "0: err 0\n");

    // Errors name the problem.
    let o = gangctl(&c, &["output", &ids, "--rank", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("gangctl: job {id} has 2 ranks (0 to 1): there is no rank 2\n")
    );
    for cmd in ["output", "attach"] {
        let o = gangctl(&c, &[cmd, "999"]);
        assert_eq!(o.status.code(), Some(1), "{cmd}");
        assert_eq!(stderr(&o), "gangctl: unknown job 999\n", "{cmd}");
    }
    let o = gangctl(&c, &["output", &ids, "--stream", "both"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // attach: a signal detaches and leaves the job running.
    let mut child = spawn(&c, "gangctl", &["attach", &ids], None);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut first: Vec<String> = (0..2).map(|_| lines.next().unwrap().unwrap()).collect();
    first.sort();
    assert_eq!(first, ["out 0", "out 1"], "replayed from the start");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let o = wait_output(child, "gangctl attach after SIGINT");
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("detached from job {id}")),
        "{}",
        stderr(&o)
    );
    assert_eq!(job(&c, id)["state"], "running");

    // attach: replay, follow to the end, the job's exit code and the failing rank's line.
    let child = spawn(&c, "gangctl", &["attach", &ids], None);
    std::fs::write(&gate, "").unwrap();
    let o = wait_output(child, "gangctl attach");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let out = stdout(&o);
    for want in ["out 0\n", "out 1\n", "after 0\n", "after 1\n"] {
        assert!(out.contains(want), "{want:?} not in {out:?}");
    }
    assert!(
        stderr(&o).ends_with("gangctl: rank 1 on node (1,0) exited with code 3\n"),
        "{}",
        stderr(&o)
    );

    // output of a finished job: all of it.
    let o = gangctl(&c, &["output", &ids, "--stream", "stdout", "--rank", "1"]);
    assert_eq!(stdout(&o), "out 1\nafter 1\n", "{}", stderr(&o));
}

#[test]
fn prun_names_the_failing_rank_and_cancels_on_sighup() {
    let c = cluster(2, 1, &[]);

    let o = prun(
        &c,
        &[
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "[ $GANG_RANK = 1 ] && exit 3; sleep 30",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "prun: rank 1 on node (1,0) exited with code 3\n"
    );

    let o = prun(
        &c,
        &[
            "-n",
            "2",
            "--quiet",
            "--",
            "sh",
            "-c",
            "[ $GANG_RANK = 1 ] && exit 3; sleep 30",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "--quiet");

    let o = prun(&c, &["-n", "1", "--", "sh", "-c", "kill -SEGV $$"], None);
    assert_eq!(o.status.code(), Some(139), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "prun: rank 0 on node (0,0) was killed by signal 11 (SIGSEGV)\n"
    );

    // SIGHUP (the terminal went away) cancels the job, as Ctrl-C does.
    let mut child = spawn(
        &c,
        "prun",
        &["-n", "2", "--", "sh", "-c", "echo up; sleep 60"],
        None,
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "up");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).unwrap();
    let o = wait_output(child, "prun after SIGHUP");
    assert!(
        stderr(&o).contains("prun: cancelling job "),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains(" cancelled: "), "{}", stderr(&o));
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    let jobs = gangctl_json(&c, &["jobs", "--all"]).unwrap();
    let last = &jobs.as_array().unwrap()[0];
    assert_eq!(last["state"], "cancelled", "{last}");
}

#[test]
fn prun_output_files_are_written_on_the_nodes() {
    let c = cluster(2, 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = "echo out $GANG_RANK; echo err $GANG_RANK >&2";

    // One file per rank, both streams in it (sbatch -o alone), nothing on the terminal.
    std::fs::create_dir(d.join("logs")).unwrap();
    let child = spawn(
        &c,
        "prun",
        &[
            "-n",
            "2",
            "-v",
            "--output",
            "logs/%j-%r-%n.out",
            "--",
            "sh",
            "-c",
            script,
        ],
        Some(d),
    );
    let o = wait_output(child, "prun --output");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert!(
        stderr(&o).contains("stdout and stderr go to files \"logs/%j-%r-%n.out\""),
        "{}",
        stderr(&o)
    );
    let id = gangctl_json(&c, &["jobs", "--all"]).unwrap()[0]["id"]
        .as_u64()
        .unwrap();
    for (r, node) in [(0, "0-0"), (1, "1-0")] {
        let f = d.join(format!("logs/{id}-{r}-{node}.out"));
        assert_eq!(
            std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())),
            format!("out {r}\nerr {r}\n")
        );
    }
    // Not through the master: gangctl output says where it went.
    let o = gangctl(&c, &["output", &id.to_string()]);
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("go to files"), "{}", stderr(&o));

    // --error apart, into a file both ranks share (appended); stdout still relayed.
    let child = spawn(
        &c,
        "prun",
        &["-n", "2", "--error", "%j.err", "--", "sh", "-c", script],
        Some(d),
    );
    let o = wait_output(child, "prun --error");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("out 0\n") && out.contains("out 1\n"),
        "{out:?}"
    );
    assert!(!stderr(&o).contains("err "), "{}", stderr(&o));
    let id = gangctl_json(&c, &["jobs", "--all"]).unwrap()[0]["id"]
        .as_u64()
        .unwrap();
    let shared = std::fs::read_to_string(d.join(format!("{id}.err"))).unwrap();
    let mut lines: Vec<&str> = shared.lines().collect();
    lines.sort();
    assert_eq!(lines, ["err 0", "err 1"]);

    // Refused at the edge: an unknown escape, an empty pattern.
    for (bad, want) in [
        (
            "x-%x",
            "unknown %x in \"x-%x\": expected %j (job id), %r (rank), %n (node X-Y), %A and %a \
             (array job id and task index) or %%",
        ),
        ("", "the file pattern is empty"),
    ] {
        let o = prun(&c, &["-n", "1", "--output", bad, "--", "true"], None);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{bad:?}: {}", stderr(&o));
    }

    // The API refuses what prun refuses, naming the field.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = jobs_client(&c).await;
        for (output, error, want) in [
            (
                "a%",
                "",
                "spec.output: \"a%\" ends with a lone %: write %% for a percent sign",
            ),
            ("", "e-%q", "spec.error: unknown %q in \"e-%q\""),
        ] {
            let spec = v1::JobSpec {
                shape: "1".into(),
                argv: vec!["true".into()],
                cwd: "/tmp".into(),
                output: output.into(),
                error: error.into(),
                ..Default::default()
            };
            let req = v1::SubmitRequest {
                spec: Some(spec),
                ..Default::default()
            };
            let e = client.submit(req).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
            assert!(e.message().starts_with(want), "{want:?}: {}", e.message());
        }
    });

    // A directory that does not exist: the job fails naming the file and the node.
    let child = spawn(
        &c,
        "prun",
        &["-n", "1", "--output", "nope/%r.out", "--", "true"],
        Some(d),
    );
    let o = wait_output(child, "prun --output into a missing directory");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let want = format!(
        "node (0,0): output file {}: the directory {} does not exist",
        d.join("nope/0.out").display(),
        d.join("nope").display()
    );
    assert!(stderr(&o).contains(&want), "{want:?} not in {}", stderr(&o));

    // A file the rank cannot open (here: a directory), found by the rank itself as it
    // opens the file: the job fails naming the file, not the program.
    let child = spawn(
        &c,
        "prun",
        &["-n", "1", "--output", "logs", "--", "true"],
        Some(d),
    );
    let o = wait_output(child, "prun --output onto a directory");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let want = format!(
        "node (0,0): output file {}: Is a directory (os error 21)",
        d.join("logs").display()
    );
    assert!(stderr(&o).contains(&want), "{want:?} not in {}", stderr(&o));
}
