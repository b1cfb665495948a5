//! Slice tables and the clock: a late table, the newest version, the probed offset, and
//! switching on while the master is gone.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_table_applies_at_the_next_boundary() {
    let mut s = Setup::start(4, 0, 0, ClockMode::Host).await;
    let q = 400 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let epoch = (s.now().div_euclid(q) - 10) * q;
    // Send it 80-200 ms into a slot, with that slot's start as its effective time.
    loop {
        let into = (s.now() - epoch).rem_euclid(q);
        if (80 * MS..200 * MS).contains(&into) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let k = (s.now() - epoch).div_euclid(q);
    let effective = epoch + k * q;
    s.set_table(node_table(1, epoch, q, effective, &rows))
        .await
        .unwrap();
    let boundary = effective + q;
    // Nothing is switched mid-slot...
    let before = s
        .sample(&[p1, p2], s.now(), boundary - 20 * MS, proc_state)
        .await;
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|x| !x.values.contains(&Some('T'))),
        "switched before the next boundary"
    );
    // ...then it runs in step from the boundary on.
    let after = s
        .sample(
            &[p1, p2],
            boundary + MARGIN,
            boundary + q + 200 * MS,
            state_and_cpu,
        )
        .await;
    let switched = s.switched(boundary + q + 200 * MS, q).await;
    let (judged, bad) = judge_states(
        &after,
        &switched,
        MARGIN,
        &[1, 2],
        epoch,
        q,
        &rows,
        |st| st != 'T',
        |st| st == 'T',
    );
    assert!(judged >= 100, "only {judged}");
    assert!(bad.is_empty(), "{bad:#?}");
    let recs = s.wait_records("the first switch", 1, 1).await;
    assert_eq!(recs[0].deadline_ns, boundary);
    assert_eq!(recs[0].slot, k + 1);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_table_version_wins_and_heartbeats_report_it() {
    let mut s = Setup::start(4, 1, 0, ClockMode::Host).await;
    let far = s.now() + 3_600_000 * MS;
    let t = |v| node_table(v, far, 10 * MS, far, &[0]);
    assert_eq!(s.set_table(t(5)).await.unwrap(), 5);
    assert_eq!(
        s.set_table(t(3)).await.unwrap(),
        5,
        "an older table is ignored"
    );
    assert_eq!(s.set_table(t(5)).await.unwrap(), 5, "idempotent");
    assert_eq!(s.set_table(t(6)).await.unwrap(), 6);
    let mut bad = t(7);
    bad.quantum_ns = MS / 2;
    let err = s.set_table(bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("node (4,1): "),
        "{}",
        err.message()
    );
    assert!(err.message().contains("quantum"), "{}", err.message());
    let hb = s
        .registry
        .wait_for("a heartbeat with table 6", |events| {
            events.iter().find_map(|e| match e {
                Event::Heartbeat(h) if h.table_version == 6 => Some(h.clone()),
                _ => None,
            })
        })
        .await;
    assert!(hb.clock_from_host);
    assert_eq!((hb.clock_offset_ns, hb.clock_error_ns), (0, 0));
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probed_clock_offset_is_reported() {
    let ahead = -1_500 * MS;
    let s = Setup::start(4, 3, ahead, ClockMode::Probe).await;
    let hb = s
        .registry
        .wait_for("a heartbeat with the offset", |events| {
            events.iter().find_map(|e| match e {
                Event::Heartbeat(h) if h.clock_offset_ns != 0 => Some(h.clone()),
                _ => None,
            })
        })
        .await;
    assert!(!hb.clock_from_host);
    assert!(
        hb.clock_error_ns > 0 && hb.clock_error_ns < 50 * MS,
        "{hb:?}"
    );
    assert!(
        (hb.clock_offset_ns - ahead).abs() <= hb.clock_error_ns,
        "offset {} ± {} vs {ahead}",
        hb.clock_offset_ns,
        hb.clock_error_ns
    );
    // The burst at start: 8 probes 20 ms apart, where the 1 s period would take 7 s
    // (bounded at half that: a loaded host stretches 20 ms sleeps, not to seconds).
    wait_until("the burst of probes", || s.registry.probes_at().len() >= 8).await;
    let at = s.registry.probes_at();
    let burst = at[7] - at[0];
    assert!(
        burst < Duration::from_millis(3_500),
        "8 probes took {burst:?}"
    );
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_goes_on_while_the_master_is_gone() {
    let mut s = Setup::start(4, 2, 0, ClockMode::Host).await;
    let q = 30 * MS;
    let rows = [1, 2];
    let p1 = s.launch(1, GangMode::Stop, "sleep 30").await;
    let p2 = s.launch(2, GangMode::Stop, "sleep 30").await;
    let epoch = grid_after(s.now(), 100 * MS, q);
    s.set_table(node_table(1, epoch, q, epoch, &rows))
        .await
        .unwrap();
    s.wait_records("a first report", 1, 1).await;
    let addr = s.registry.addr;
    let Setup {
        registry,
        agent,
        client,
        ahead,
    } = s;
    let pki = registry.stop().await;
    let gone_at = realtime_ns();

    let before = agent.node.switch.switches();
    let sw = std::sync::Arc::clone(&agent.node.switch);
    wait_until("20 switches with the master gone", || {
        sw.switches() >= before + 20
    })
    .await;
    let s = Setup {
        registry: TestRegistry::start_on(addr, pki, MasterOptions::default()).await,
        agent,
        client,
        ahead,
    };
    let from = s.now() + MARGIN;
    let samples = s
        .sample(&[p1, p2], from, from + 300 * MS, state_and_cpu)
        .await;
    let switched = s.switched(from + 300 * MS, q).await;
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
    assert!(judged >= 30 && bad.is_empty(), "{judged} judged: {bad:#?}");
    // The records made while it was gone were kept and arrive now.
    s.registry
        .wait_for("records from the outage", |events| {
            events
                .iter()
                .any(|e| matches!(e, Event::Switches(r) if r.records.iter().any(|x| x.deadline_ns > gone_at && x.deadline_ns < gone_at + 200 * MS)))
                .then_some(())
        })
        .await;
    assert!(s.records().iter().all(|r| r.table_version == 1));
    s.agent.shutdown().await;
}
