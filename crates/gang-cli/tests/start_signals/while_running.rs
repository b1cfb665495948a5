//! Signals while a job runs, and what is left after a kill: nothing.

use super::*;

/// The case: a job's ranks run under `gangctl start -- prun`.
fn stop_while_a_job_runs(signal: Signal, code: i32) {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&[
        "--mesh", "2x2", "--", "prun", "-n", "2x2", "--", "sleep", "600",
    ]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(signal);
    report("ranks running", signal, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(code), "{err}");
    assert!(
        err.contains(&format!("gangctl: {signal}: stopping prun and the cluster")),
        "{err}"
    );
    // prun got the signal and cancelled its job.
    assert!(err.contains("prun: cancelling job 1"), "{err}");
    assert_nothing_left(Duration::from_secs(2), "a signal while ranks run");
    g.assert_tmp_empty();
}

#[test]
fn sigint_while_a_job_runs() {
    stop_while_a_job_runs(Signal::SIGINT, 130);
}

#[test]
fn sigterm_while_a_job_runs() {
    stop_while_a_job_runs(Signal::SIGTERM, 143);
}

/// `nohup gangctl start ... &` survives the hangup and the Ctrl-C it was started
/// ignoring (and so does the prun it runs, which inherits that); SIGTERM still stops it.
#[test]
fn signals_ignored_at_start_stay_ignored() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn_ignoring(
        &[
            "--mesh", "2x2", "--", "prun", "-n", "2x2", "--", "sleep", "600",
        ],
        &[Signal::SIGHUP, Signal::SIGINT],
    );
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );
    let prun = descendants_of(pid)
        .into_iter()
        // prun by its name: the daemons' paths (the build directory) may hold the word.
        .find(|p| p.ppid == pid && p.cmdline.starts_with("prun "))
        .expect("prun runs under gangctl");
    // Discarded as they are sent: were either taken, the first would decide the status.
    for s in [Signal::SIGHUP, Signal::SIGINT] {
        kill(Pid::from_raw(prun.pid), s).unwrap();
        kill(Pid::from_raw(pid), s).unwrap();
    }
    let (status, _) = g.signal_and_wait(Signal::SIGTERM);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: SIGTERM: stopping prun and the cluster"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "SIGTERM after ignored signals");
    g.assert_tmp_empty();
}

/// Nothing is left even when nobody tears down: an agent SIGKILLed takes its ranks with
/// it (PR_SET_PDEATHSIG in the agent), and gangctl SIGKILLed takes the daemons (they
/// were forked by a thread that asked for SIGTERM at its end), their ranks, and CMD
/// (SIGHUP) with it.
#[test]
fn sigkill_of_an_agent_or_of_gangctl_leaves_nothing() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    let mut g = Gangctl::spawn(&["--mesh", "2x2", "--", "sleep", "600"]);
    let pid = g.pid();
    assert!(
        wait_for(STAGE_DEADLINE, || g.master().is_some()),
        "the cluster did not come up: {}",
        g.stderr()
    );
    let o = Command::new(PRUN)
        .args(["-n", "2x2", "--detach", "--", "sleep", "600"])
        .env("GANG_MASTER", g.master().unwrap())
        .env("GANG_CONFIG", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        wait_for(STAGE_DEADLINE, || ranks_below(pid).len() == 4),
        "the job's 4 ranks did not start: {}",
        g.stderr()
    );

    // An agent dies without stopping its rank: the rank dies with it.
    let ranks = ranks_below(pid);
    let rank = &ranks[0];
    kill(Pid::from_raw(rank.ppid), Signal::SIGKILL).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || !alive(rank.pid)),
        "rank {} outlived its agent {}",
        rank.pid,
        rank.ppid
    );

    // gangctl dies without a teardown: everything follows it.
    let sent = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let status = g.child.wait().unwrap();
    assert_nothing_left(EXIT_DEADLINE, "gangctl SIGKILLed");
    eprintln!(
        "gangctl SIGKILLed ({status}): everything below it gone in {:?}",
        sent.elapsed()
    );
}

/// A command that ignores SIGTERM is SIGKILLed at a second signal; its child, orphaned,
/// comes to gangctl (a child subreaper) and is killed at the end.
#[test]
fn a_stubborn_command_is_killed_and_its_orphans_swept() {
    let _serial = serial();
    if !daemons_built() {
        return;
    }
    // `; :` keeps sh from exec'ing sleep: sleep stays sh's child.
    let mut g = Gangctl::spawn(&[
        "--mesh",
        "1x1",
        "--",
        "sh",
        "-c",
        "trap '' INT TERM; sleep 600; :",
    ]);
    let pid = g.pid();
    let sleeping = || {
        descendants_of(pid)
            .iter()
            .any(|p| p.alive() && p.cmdline == "sleep 600")
    };
    assert!(
        wait_for(STAGE_DEADLINE, sleeping),
        "the command did not start: {}",
        g.stderr()
    );
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    assert!(
        wait_for(STAGE_DEADLINE, || g
            .stderr()
            .contains("gangctl: SIGTERM: stopping sh and the cluster")),
        "{}",
        g.stderr()
    );
    let (status, took) = g.signal_and_wait(Signal::SIGTERM);
    report("a stubborn command, twice", Signal::SIGTERM, took, status);
    let err = g.final_stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("gangctl: killed 1 leftover process(es)"),
        "{err}"
    );
    assert_nothing_left(Duration::from_secs(2), "a stubborn command");
    g.assert_tmp_empty();
}
