//! Each gang mode on the agent's own switch thread: stop, priority, freeze; and a cancel
//! that reaches a switched-out job.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_mode_jobs_alternate_on_the_master_clock() {
    // The master clock is 2 s ahead: switching at the right instants proves the offset
    // is estimated and applied. The thread wakes early and spins to each deadline.
    let mut s = Setup::start_spinning(
        3,
        0,
        2_000 * MS,
        ClockMode::Probe,
        Duration::from_micros(300),
    )
    .await;
    let q = 40 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, BUSY).await;
    // Not in the table: left running.
    let p3 = s.launch(3, GangMode::Stop, "sleep 30").await;
    let epoch = grid_after(s.now(), 200 * MS, q);
    assert_eq!(
        s.set_table(node_table(1, epoch, q, epoch, &rows))
            .await
            .unwrap(),
        1
    );
    // Job 2 starts after its table is in force: it is brought into step at once.
    s.sleep_until(epoch + q / 2).await;
    let p2 = s.launch(2, GangMode::Stop, BUSY).await;
    let from = s.now() + MARGIN;
    let samples = s
        .sample(&[p1, p2, p3], from, from + 1_200 * MS, state_and_cpu)
        .await;
    let switched = s.switched(from + 1_200 * MS, q).await;
    let (judged, bad) = judge_states(
        &samples,
        &switched,
        MARGIN,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st != 'T',
        |st| st == 'T',
    );
    assert!(judged >= 100, "only {judged} samples judged");
    assert!(
        bad.is_empty(),
        "{} of {judged} wrong: {:#?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    for (i, job) in [(0, 1), (1, 2)] {
        assert!(
            samples.iter().any(|x| x.values[i].0 == Some('T')),
            "job {job} never stopped"
        );
        assert!(
            samples.iter().any(|x| x.values[i].0 == Some('R')),
            "job {job} never ran"
        );
    }
    assert!(
        samples.iter().all(|x| x.values[2].0 != Some('T')),
        "job 3 (not in the table) was stopped"
    );

    // The records: on the grid, stop+continue each, soon after the deadline.
    let recs = s.wait_records("20 switch records", 20, 1).await;
    let mut latencies: Vec<i64> = Vec::new();
    for r in &recs {
        assert_eq!((r.deadline_ns - epoch).rem_euclid(q), 0, "{r:?}");
        assert_eq!(r.slot, (r.deadline_ns - epoch) / q, "{r:?}");
        assert!(r.actions >= 1 && r.actions <= 2, "{r:?}");
        assert!(r.last_signal_ns >= r.first_signal_ns, "{r:?}");
        // On the agent's own estimate of the master clock, never before the deadline;
        // on the true one, within the error bound.
        assert!(r.first_signal_ns >= r.deadline_ns, "switched early: {r:?}");
        assert!(r.clock_error_ns > 0 && r.clock_error_ns < 50 * MS, "{r:?}");
        latencies.push(r.last_signal_ns - r.deadline_ns);
    }
    latencies.sort_unstable();
    let median = latencies[latencies.len() / 2];
    assert!(median < 5 * MS, "median switch latency {median} ns");
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_mode_renices_and_an_unnamed_job_is_restored() {
    let mut s = Setup::start(3, 1, 0, ClockMode::Host).await;
    let q = 50 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Priority, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Priority, "sleep 30").await;
    let base = proc_nice(p1).unwrap();
    let niced = (base + 15).min(19);
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let samples = s
        .sample(&[p1, p2], epoch + MARGIN, epoch + 600 * MS, proc_nice)
        .await;
    let switched = s.switched(epoch + 600 * MS, q).await;
    let (judged, bad) = judge(&samples, &switched, &[1, 2], epoch, q, &rows, |v| {
        *v == Some(base)
    });
    assert!(judged >= 50, "only {judged} samples judged");
    assert!(bad.is_empty(), "{bad:#?}");
    assert_switched_on_time(&switched, epoch, epoch + 600 * MS);
    assert!(samples.iter().any(|x| x.values[0] == Some(niced)));
    // Processes keep state R/S: priority mode never stops them.
    assert_ne!(proc_state(p1), Some('T'));

    // A table that no longer names them: both back to their base nice, and left alone.
    let at = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(2, epoch, q, at, &[0]))
        .await
        .unwrap();
    s.sleep_until(at + MARGIN).await;
    wait_until("both at base nice", || {
        proc_nice(p1) == Some(base) && proc_nice(p2) == Some(base)
    })
    .await;
    let later = s
        .sample(&[p1, p2], at + MARGIN, at + 200 * MS, proc_nice)
        .await;
    assert!(
        later
            .iter()
            .all(|x| x.values == vec![Some(base), Some(base)]),
        "reniced after the table stopped naming the jobs"
    );
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_mode_freezes_in_a_cgroup_removed_at_exit() {
    let mut s = Setup::start(3, 2, 0, ClockMode::Host).await;
    let Some(base) = s.agent.node.switch.freezer().map(|f| f.dir.clone()) else {
        eprintln!("skipped: no writable cgroup freezer on this machine (the agent logged why)");
        s.agent.shutdown().await;
        return;
    };
    let q = 50 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Freeze, BUSY).await;
    let p2 = s.launch(2, GangMode::Freeze, BUSY).await;
    let dir1 = base.join("job-1-rank-0");
    assert!(dir1.is_dir(), "{} missing", dir1.display());
    if let Some(cg) = cgroup_of(p1) {
        assert!(cg.ends_with("/job-1-rank-0"), "rank 1 is in {cg}");
    }
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let samples = s
        .sample(&[p1, p2], epoch + MARGIN, epoch + 800 * MS, state_and_cpu)
        .await;
    let switched = s.switched(epoch + 800 * MS, q).await;
    // A busy loop is R whenever it may run; frozen it is not (D on cgroup v1).
    let (judged, bad) = judge_states(
        &samples,
        &switched,
        FREEZE_MARGIN,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st == 'R',
        |st| st != 'R' && st != 'T',
    );
    assert!(judged >= 60, "only {judged} samples judged");
    assert!(bad.is_empty(), "{:#?}", &bad[..bad.len().min(10)]);
    for i in 0..2 {
        assert!(
            samples
                .iter()
                .any(|x| x.values[i].0.is_some_and(|c| c != 'R')),
            "job {} never seen frozen",
            i + 1
        );
    }
    // Frozen, not stopped: no SIGSTOP was sent.
    assert!(
        samples
            .iter()
            .all(|x| x.values.iter().all(|v| v.0 != Some('T')))
    );

    // Cancel: the frozen job is thawed so the TERM ends it; its cgroup goes with it.
    assert!(s.signal(1, 20_000).await);
    assert_eq!(s.registry.exit_of(1, 0).await.1, How::Signal(15));
    wait_until("the cgroup of an ended rank to be removed", || {
        !dir1.exists()
    })
    .await;
    // Shutdown with job 2 possibly frozen: still killed and reaped.
    s.agent.shutdown().await;
    assert_eq!(proc_state(p2), None);
    assert_eq!(s.registry.exit_of(2, 0).await.1, How::Signal(9));
    assert!(
        !base.exists(),
        "the agent's freezer directory is left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_switched_out_job() {
    let mut s = Setup::start(3, 3, 0, ClockMode::Host).await;
    // Long slots: slot 0 runs job 2; jobs 1 (STOP) and 3 (FREEZE) are out for 5 s.
    let q = 5_000 * MS;
    let rows = [2, 1, 3];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let p3 = s.launch(3, GangMode::Freeze, "sleep 30").await;
    let epoch = grid_after(s.now(), 50 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    let freezer = cgroup_of(p3)
        .filter(|c| c.contains("job-3-rank-0"))
        .map(|c| format!("/sys/fs/cgroup/freezer{c}/freezer.state"));
    wait_until("job 1 stopped and job 3 frozen", || {
        proc_state(p1) == Some('T')
            && match &freezer {
                Some(f) => std::fs::read_to_string(f).is_ok_and(|st| st.trim() == "FROZEN"),
                None => proc_state(p3) == Some('T'),
            }
    })
    .await;
    if freezer.is_none() {
        eprintln!("note: no freezer here; job 3 was switched with SIGSTOP");
    }
    let t0 = Instant::now();
    assert!(s.signal(1, 20_000).await);
    assert!(s.signal(3, 20_000).await);
    assert_eq!(s.registry.exit_of(1, 0).await.1, How::Signal(15));
    assert_eq!(s.registry.exit_of(3, 0).await.1, How::Signal(15));
    // By the TERM, long before their rows came back (or the grace ran out).
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(
        s.now() < epoch + q,
        "the slot was over before the cancel took"
    );
    // Job 2 was never disturbed.
    assert_eq!(proc_state(p2), Some('S'));
    s.agent.shutdown().await;
}
