//! Slurm habits of `prun` and `gangctl submit` on a real local cluster: `-N` with `-n`,
//! `-u`/`--pty` (a pseudo-terminal for rank 0, or every rank with `--label`), Ctrl-C's
//! exit 130, a script without a node count, its `srun` lines, and `release` of a job
//! that was never held.
//!
//! Like `local_cluster.rs`, these need `gang-master` and `gang-agent` built next to the
//! commands, and say so and pass otherwise.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The lines a child writes on stdout, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_exit(mut child: Child, what: &str) -> std::process::Output {
    let deadline = Instant::now() + T;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{what}: prun did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The newest job's id (`gangctl jobs` lists newest first).
fn newest_job(c: &gang_local::LocalCluster) -> u64 {
    ids(&json(c, &["jobs", "--all"]))[0]
}

#[test]
fn n_and_big_n_together_as_srun_takes_them() {
    let Some(c) = cluster((2, 2), 1) else { return };
    for args in [
        &["-N", "4", "-n", "4"][..],
        &["--nodes=4", "--ntasks=4"],
        &["-N", "4", "-n", "2x2"],
    ] {
        let o = cmd(PRUN, &c)
            .args(args)
            .args(["--label", "--", "echo", "hi"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout).lines().count(), 4, "{args:?}");
    }
    let o = run(PRUN, &c, &["-N", "2", "-n", "4", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(
            "-n 4 asks 4 tasks and -N 2 asks 2 nodes: one rank runs on each node here, so -N \
             and -n say the same; give one of them, or the same count"
        ),
        "{}",
        text(&o.stderr)
    );
    // gangctl submit and alloc take them too.
    let o = run(
        GANGCTL,
        &c,
        &["submit", "-N", "2", "-n", "3", "--wrap", "true"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("-n 3 asks 3 tasks"),
        "{}",
        text(&o.stderr)
    );
    let o = run(
        GANGCTL,
        &c,
        &[
            "submit",
            "--parsable",
            "-N",
            "2",
            "-n",
            "2",
            "--wrap",
            "true",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id: u64 = text(&o.stdout).trim().parse().unwrap();
    let j = wait_job(&c, id, "completed", |j| j["state"] == "completed");
    assert_eq!(j["asked"], "2", "{j}");
    c.shutdown().expect("clean shutdown");
}

/// `prun -u`: a program whose stdout buffers in a pipe (Python's) writes its line as it
/// prints it, while the job runs; Ctrl-C then cancels the job and prun exits 130, as
/// srun; SIGTERM stays 143.
#[test]
fn unbuffered_output_arrives_while_the_job_runs_and_ctrl_c_exits_130() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let program = "import time; print('early', flush=False); time.sleep(60)";
    let mut prun = cmd(PRUN, &c);
    gang_local::with_default_signals(&mut prun);
    let mut child = prun
        .args(["-n", "1", "-u", "--", "python3", "-c", program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    assert_eq!(lines.recv_timeout(T).expect("'early' within 60 s"), "early");
    let id = newest_job(&c);
    assert_eq!(
        job(&c, id)["state"],
        "running",
        "the line came before the end"
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let o = wait_exit(child, "Ctrl-C");
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("prun: cancelling job {id}")),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(job(&c, id)["state"], "cancelled");

    let mut prun = cmd(PRUN, &c);
    gang_local::with_default_signals(&mut prun);
    let mut child = prun
        .args(["-n", "1", "--", "sh", "-c", "echo up; exec sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(lines_of(&mut child).recv_timeout(T).unwrap(), "up");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let o = wait_exit(child, "SIGTERM");
    assert_eq!(o.status.code(), Some(143), "{}", text(&o.stderr));
    c.shutdown().expect("clean shutdown");
}

/// `--pty`: rank 0 has a terminal (its stdin, stdout and stderr), the job's user's, mode
/// 0620; with `--label` every rank has one; input comes a line at a time and ends.
#[test]
fn pty_gives_rank_0_a_terminal_and_label_every_rank() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let o = run(PRUN, &c, &["-n", "1", "--pty", "--", "tty"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("/dev/pts/"),
        "{}",
        text(&o.stdout)
    );
    let o = run(PRUN, &c, &["-n", "1", "--", "tty"]);
    assert_eq!(text(&o.stdout), "not a tty\n");
    // Rank 0 alone, unless --label.
    let o = run(PRUN, &c, &["-n", "2", "-u", "--", "sh", "-c", "tty; true"]);
    let mut got: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].starts_with("/dev/pts/") && got[1] == "not a tty",
        "{got:?}"
    );
    let o = run(PRUN, &c, &["-n", "2", "-u", "--label", "--", "tty"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut got: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with("0: /dev/pts/"), "{got:?}");
    assert!(got[1].starts_with("1: /dev/pts/"), "{got:?}");
    // Not compared with each other: a rank's terminal is freed when it ends, and the
    // kernel hands the same number to the next one opened (it failed once in CI so).
    // Whose it is, its mode, and stderr on it too, unchanged ("\n", not "\r\n").
    let o = run(
        PRUN,
        &c,
        &[
            "-n",
            "1",
            "--pty",
            "--",
            "sh",
            "-c",
            "stat -c '%u %a' $(tty) >&2",
        ],
    );
    let uid = nix::unistd::getuid().as_raw();
    assert_eq!(
        text(&o.stdout),
        format!("{uid} 620\n"),
        "{}",
        text(&o.stderr)
    );
    // Input: lines, then its end (a last line without a newline too); not echoed.
    let mut child = cmd(PRUN, &c)
        .args(["-n", "1", "--pty", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nworld")
        .unwrap();
    let o = wait_exit(child, "cat on a terminal");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "hello\nworld");
    // Without input: its end at once, as /dev/null.
    let o = run(PRUN, &c, &["-n", "1", "--pty", "--", "cat"]);
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), String::new()));
    // Output files are not a terminal's.
    let o = run(PRUN, &c, &["-n", "1", "-u", "-o", "x.out", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    c.shutdown().expect("clean shutdown");
}

/// `gangctl submit` of a script with no node count runs on one node; its `srun` lines are
/// named, with what srun would do (Slurm's where one is installed); `release` of a job
/// that was never held is refused.
#[test]
fn a_script_without_nodes_runs_on_one_and_its_srun_lines_are_named() {
    let Some(c) = cluster((2, 2), 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH -N 2\n# srun in a comment\nsrun hostname\nprun true\n",
    )
    .unwrap();
    // A PATH with an srun, and one without (srun may be installed in /usr/bin here).
    let slurm = dir.path().join("slurm");
    std::fs::create_dir(&slurm).unwrap();
    let srun = slurm.join("srun");
    std::fs::write(&srun, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let submit = |path: &std::path::Path, args: &[&str]| {
        cmd(GANGCTL, &c)
            .current_dir(dir.path())
            .env(
                "PATH",
                format!("{}:{}", bin_dir().display(), path.display()),
            )
            .args(["submit", "--parsable"])
            .args(args)
            .output()
            .unwrap()
    };
    let o = submit(&slurm, &["job.sh"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id: u64 = text(&o.stdout).trim().parse().unwrap();
    assert!(
        text(&o.stderr).contains(&format!(
            "gangctl: job.sh:4: srun hostname: steps here are started with prun; srun is \
             Slurm's ({}: it would ask the Slurm controller, not this cluster)\n",
            srun.display()
        )),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(text(&o.stderr).matches("srun").count(), 3, "one line named");
    let j = wait_job(&c, id, "ended", |j| {
        !["queued", "starting", "running"].contains(&j["state"].as_str().unwrap())
    });
    assert_eq!(
        (&j["asked"], &j["shape"]),
        (&"1".into(), &"1x1".into()),
        "{j}"
    );
    let o = submit(&empty, &["--wrap", "date; srun -n 2 true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(
            "gangctl: --wrap:1: date; srun -n 2 true: steps here are started with prun; srun \
             is not installed here: the line will fail\n"
        ),
        "{}",
        text(&o.stderr)
    );

    // release: only of a held job.
    let running = detach(&c, &["-n", "1", "--", "sleep", "60"]);
    wait_job(&c, running, "running", |j| j["state"] == "running");
    let o = run(GANGCTL, &c, &["release", &running.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        format!("gangctl: job {running} is running and was never held: nothing to release\n")
    );
    let held = detach(&c, &["-n", "1", "--hold", "--", "true"]);
    let o = run(GANGCTL, &c, &["release", &held.to_string()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("released {held}\n"));
    c.shutdown().expect("clean shutdown");
}
