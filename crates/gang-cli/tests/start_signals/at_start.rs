//! Signals and refusals while a local cluster starts: before, during and after the master and agents come up.

use super::*;

#[test]
fn a_mesh_over_the_ceiling_is_refused_at_once() {
    let _serial = serial();
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--mesh", "100x100"],
            &[
                "gangctl: a 100x100 mesh needs 10000 agents, one process per node on this machine (",
                "; the limit is 64 (--max-agents, at most 1024). A local cluster is for demos and tests: use a smaller mesh, or emulated nodes for a fleet test (`gangctl start --emulate`).\n",
            ],
        ),
        (
            &["--mesh", "10x10"],
            &[
                "needs 100 agents",
                "the limit is 64",
                "--max-agents 100, at most 1024",
            ],
        ),
        (
            &["--mesh", "2x2", "--max-agents", "5000"],
            &["'--max-agents <N>'", "5000 is not from 1 to 1024"],
        ),
    ];
    for (args, words) in cases {
        let started = Instant::now();
        let mut g = Gangctl::spawn(args);
        let status = g.child.wait().unwrap();
        let took = started.elapsed();
        let err = g.final_stderr();
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{args:?}: lacks {w:?}: {err}");
        }
        // "At once": no daemon was even looked for; nothing ran below gangctl.
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        assert_nothing_left(Duration::ZERO, "a refused mesh");
        g.assert_tmp_empty();
    }
    // The refusal comes before the binaries are looked for.
    let empty = tempfile::tempdir().unwrap();
    let mut g = Gangctl::spawn(&[
        "--mesh",
        "100x100",
        "--bin-dir",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(
        g.child.wait().unwrap().code(),
        Some(2),
        "{}",
        g.final_stderr()
    );
}

#[test]
fn sigint_right_after_spawn() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2"]);
    let (status, took) = g.signal_and_wait(Signal::SIGINT);
    report("right after spawn", Signal::SIGINT, took, status);
    // Before gangctl took the signals over (its first microseconds), SIGINT ends it the
    // default way; nothing had started then.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(130) || status.signal() == Some(Signal::SIGINT as i32),
        "{status}: {}",
        g.final_stderr()
    );
    assert_nothing_left(Duration::from_secs(2), "SIGINT right after spawn");
    g.assert_tmp_empty();
}

/// Whether `pid` blocks `signal` (gangctl does from its first instructions on, before it
/// starts anything).
fn blocks(pid: i32, signal: Signal) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

#[test]
fn sigint_as_the_master_starts() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2", "--", "sleep", "600"]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || blocks(pid, Signal::SIGINT)),
        "gangctl never took SIGINT over"
    );
    let (status, took) = g.signal_and_wait(Signal::SIGINT);
    report("the master starting", Signal::SIGINT, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("gangctl: SIGINT while starting the cluster: stopping it"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGINT as the master starts");
    g.assert_tmp_empty();
}

#[test]
fn sigterm_while_the_agents_of_a_4x4_start() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "4x4", "--", "sleep", "600"]);
    assert!(
        wait_for(STAGE_DEADLINE, || g.files_in_cluster_dir("agent-", ".log")
            > 0),
        "no agent started: {}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGTERM);
    report("agents of a 4x4 starting", Signal::SIGTERM, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: SIGTERM while starting the cluster: stopping it"),
        "{err}"
    );
    assert!(
        !err.contains("cluster up"),
        "the signal came too late: {err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGTERM while agents start");
    g.assert_tmp_empty();
}

/// Fake agents that never register keep gangctl waiting for the nodes (30 s at most); each
/// leaves a helper in its process group. SIGHUP ends the wait at once, helpers included.
#[test]
fn sighup_while_waiting_for_the_nodes() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let bins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        bin_dir().join("gang-master"),
        bins.path().join("gang-master"),
    )
    .unwrap();
    let agent = bins.path().join("gang-agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\nsleep 600 &\n: > \"started-$$\"\nexec sleep 600\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut g = Gangctl::spawn(&[
        "--mesh",
        "2x2",
        "--bin-dir",
        bins.path().to_str().unwrap(),
        "--",
        "sleep",
        "600",
    ]);
    assert!(
        wait_for(STAGE_DEADLINE, || g.files_in_cluster_dir("started-", "")
            == 4),
        "the fake agents did not start: {}",
        g.stderr()
    );
    let pid = g.pid();
    let sleeps = || {
        descendants_of(pid)
            .iter()
            .filter(|p| p.alive() && p.cmdline == "sleep 600")
            .count()
    };
    assert!(
        wait_for(STAGE_DEADLINE, || sleeps() == 8),
        "4 fake agents and their helpers: {}",
        sleeps()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGHUP);
    report("waiting for the nodes", Signal::SIGHUP, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(129), "{err}");
    assert!(!err.contains("cluster up"), "{err}");
    assert_nothing_left(Duration::from_secs(2), "SIGHUP while waiting for nodes");
    g.assert_tmp_empty();
}
