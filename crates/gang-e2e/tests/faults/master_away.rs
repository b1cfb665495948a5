//! The master away while jobs run: stopped (SIGSTOP) for 30 s, or down for 20 s between a
//! kill and its restart. Agents keep their ranks and keep switching on their last table
//! (the master's lease), the master blames no node for its own silence, and `prun`
//! waits or reattaches: every job completes, every line of its output arrives once.

use super::*;

/// What each rank runs: a line a tenth of a second, numbered, for `secs` seconds of wall
/// time (stopped in other slices or not), then `done N`.
fn counting(secs: u32) -> String {
    format!(
        "end=$(($(date +%s)+{secs})); i=0; while [ $(date +%s) -lt $end ]; do i=$((i+1)); echo $i; sleep 0.1; done; echo done $i"
    )
}

/// Every rank's lines are 1..=n in order, then `done n`: nothing lost, nothing twice.
fn assert_whole(out: &std::process::Output, ranks: usize) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "prun failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut by_rank: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let (rank, rest) = line.split_once(": ").expect("a labelled line");
        by_rank
            .entry(rank.parse().expect("a rank"))
            .or_default()
            .push(rest.to_string());
    }
    assert_eq!(by_rank.len(), ranks, "every rank wrote: {text}");
    for (rank, lines) in by_rank {
        let (last, counted) = lines.split_last().expect("lines");
        let n = counted.len();
        assert_eq!(
            last,
            &format!("done {n}"),
            "rank {rank} ends with its count"
        );
        for (i, l) in counted.iter().enumerate() {
            assert_eq!(
                l,
                &(i + 1).to_string(),
                "rank {rank}: line {} of {n}",
                i + 1
            );
        }
    }
}

/// Two jobs in two slices (a 2x2 and a 2x1, so they switch), attached by `prun` on
/// threads of their own; returns once both run.
fn two_switching_jobs(
    c: &LocalCluster,
    secs: u32,
) -> Vec<std::thread::JoinHandle<std::process::Output>> {
    let jobs = [("2x2", 4), ("2x1", 2)].map(|(shape, _)| {
        let master = gang_e2e::MasterAddr(c.master_addr().to_string());
        let script = counting(secs);
        std::thread::spawn(move || {
            prun_within(
                &master,
                &["-n", shape, "--label", "--", "sh", "-c", &script],
                Duration::from_secs(u64::from(secs) + 180),
            )
        })
    });
    wait_for(T, "both jobs to run", || {
        let jobs = gangctl_json(c, &["jobs"]).ok()?;
        let running = jobs
            .as_array()?
            .iter()
            .filter(|j| j["state"] == "running")
            .count();
        (running == 2).then_some(())
    });
    jobs.into()
}

fn no_node_blamed(c: &LocalCluster) {
    let log = without_colours(&std::fs::read_to_string(c.master_log()).unwrap());
    for blame in ["node down", " lost: ", "was not found after"] {
        assert!(!log.contains(blame), "{blame:?} in the master's log: {log}");
    }
}

/// SIGSTOP of the master for 30 s (ten node timeouts, its agents' calls all unanswered),
/// then SIGCONT: both jobs run through it and complete with every line.
#[test]
fn a_master_stopped_for_30_s_loses_no_job_and_no_line() {
    let _serial = serial();
    let mut c = cluster(2, 2, &["--mpl", "2"]);
    let prun = two_switching_jobs(&c, 45);
    std::thread::sleep(Duration::from_secs(3));
    let pid = nix::unistd::Pid::from_raw(c.master_pid().expect("the master runs") as i32);
    nix::sys::signal::kill(pid, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(30));
    nix::sys::signal::kill(pid, Signal::SIGCONT).unwrap();
    let outs: Vec<_> = prun.into_iter().map(|h| h.join().unwrap()).collect();
    assert_whole(&outs[0], 4);
    assert_whole(&outs[1], 2);
    no_node_blamed(&c);
    // Their beats failed while it was stopped, but it never forgot them: no agent
    // registered again (thousands at once, on a loaded master, is what it would cost).
    for (x, y) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let log = c.agent_log(x, y);
        assert!(
            disk_full::count_lines(&log, &["heartbeat failed"]) > 0,
            "agent ({x},{y}) saw no heartbeat fail while the master was stopped"
        );
        let registered = disk_full::count_lines(&log, &["registered with the master"]);
        assert_eq!(registered, 1, "agent ({x},{y}) registered again");
    }
    c.check_alive().unwrap();
    c.shutdown().unwrap();
}

/// The master killed and started again 20 s later (a restart that takes its time: a
/// slow disk, a big state, a unit's restart delay): both jobs complete with every line.
#[test]
fn a_master_down_for_20_s_loses_no_job_and_no_line() {
    let _serial = serial();
    let mut c = cluster(2, 2, &["--mpl", "2"]);
    let prun = two_switching_jobs(&c, 40);
    std::thread::sleep(Duration::from_secs(3));
    c.stop_master(Signal::SIGKILL).unwrap();
    std::thread::sleep(Duration::from_secs(20));
    c.start_master().unwrap();
    let outs: Vec<_> = prun.into_iter().map(|h| h.join().unwrap()).collect();
    assert_whole(&outs[0], 4);
    assert_whole(&outs[1], 2);
    no_node_blamed(&c);
    c.shutdown().unwrap();
}
