//! The messaging library's events through the reactor: deadlock checks from heartbeat
//! activity, the policies, and fences gathered across nodes.

use std::collections::BTreeMap;

use gang_core::job::deadlock::Activity;
use gang_core::{DeadlockPolicy, JobId};

use crate::error::MasterError;
use crate::job::State;
use crate::state::effects::Metric;
use crate::state::events::FenceArrival;
use crate::state::reactor;
use crate::state::testkit::{World, config, new_job};

/// A 2x1 job running on a 2x2 mesh, with its ranks started.
fn running(policy: Option<DeadlockPolicy>) -> World {
    let mut w = World::new(config(2, 2, 1));
    w.register_all();
    let mut job = new_job("2x1", 1000, 0);
    job.on_deadlock = policy;
    w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
        .unwrap();
    for (node, order) in w.fx.take_launches(JobId(1)) {
        w.started(node, &order);
    }
    assert_eq!(w.view(1).state(), State::Running);
    w
}

fn act(rank: u32, since: i64, posted: u64, delivered: u64) -> (JobId, Activity) {
    (
        JobId(1),
        Activity {
            rank,
            blocked_since_ns: since,
            source: 1 - rank as i32,
            tag: 7,
            posted,
            delivered,
        },
    )
}

/// Both ranks report what they do (rank r of the 2x1 job runs on node (r,0)).
fn report(w: &mut World, r0: (JobId, Activity), r1: (JobId, Activity)) {
    w.activity.insert((0, 0), vec![r0]);
    w.activity.insert((1, 0), vec![r1]);
}

fn deadlocks(w: &World) -> usize {
    w.fx.metrics()
        .iter()
        .filter(|m| **m == Metric::Deadlocked)
        .count()
}

#[test]
fn every_rank_blocked_with_nothing_in_flight_is_flagged_at_the_second_check() {
    let mut w = running(None);
    report(&mut w, act(0, 10, 3, 3), act(1, 11, 3, 3));
    w.tick_after_ms(500);
    assert!(w.view(1).deadlock.is_none(), "one check proves nothing");
    w.tick_after_ms(500);
    let d = w.view(1).deadlock.expect("flagged at the second check");
    assert_eq!(d.waits.len(), 2);
    assert_eq!(d.waits[1].1, (1, 0), "each wait names its node");
    assert_eq!((d.waits[0].0.source, d.waits[0].0.tag), (1, 7));
    assert_eq!(d.messages, 6);
    assert_eq!(deadlocks(&w), 1);
    // Report: it runs on, flagged once.
    w.tick_after_ms(2000);
    assert_eq!(w.view(1).state(), State::Running);
    assert_eq!(deadlocks(&w), 1);
    assert!(w.fx.take_signals(JobId(1)).is_empty());
}

/// Under `report` a deadlocked job is parked: the next table runs it in no row and lists
/// it as parked on its nodes (the agents keep it stopped), its run time stops, and the
/// table drops it once it is cancelled.
#[test]
fn a_reported_deadlock_parks_the_job_until_it_is_cancelled() {
    let mut w = running(None);
    w.tick_after_ms(100);
    let before = w.fx.take_tables();
    assert!(
        before.iter().all(|(_, t)| t.parked.is_empty()),
        "{before:?}"
    );
    report(&mut w, act(0, 10, 3, 3), act(1, 11, 3, 3));
    w.tick_after_ms(500);
    w.tick_after_ms(500);
    assert!(w.view(1).deadlock.is_some());
    let tables = w.fx.take_tables();
    for node in [(0, 0), (1, 0)] {
        let (_, t) = tables
            .iter()
            .rev()
            .find(|(n, _)| *n == node)
            .expect("a new table for each of its nodes");
        assert_eq!(t.parked, vec![JobId(1)], "{node:?}");
        assert!(t.rows.iter().all(|r| *r != Some(JobId(1))), "{t:?}");
    }
    // No slots: its run time stands still once the parking table is in force.
    w.tick_after_ms(1000);
    let run = w.view(1).run_ns;
    w.tick_after_ms(3000);
    assert_eq!(w.view(1).run_ns, run, "a parked job runs no time");
    assert_eq!(w.view(1).state(), State::Running);
    // Cancelled: no longer parked (it is let go, continued and signalled).
    w.step(|st, fx, now| {
        reactor::on_cancel(st, fx, now, JobId(1), &crate::state::testkit::caller(0))
    })
    .unwrap();
    let after = w.fx.take_tables();
    assert!(after.iter().all(|(_, t)| t.parked.is_empty()), "{after:?}");
}

#[test]
fn a_job_that_moves_computes_or_has_a_message_in_flight_is_never_flagged() {
    let mut w = running(Some(DeadlockPolicy::Kill));
    for i in 0..10 {
        // Blocked anew at every check (it receives, then waits again).
        report(
            &mut w,
            act(0, 10 + i, i as u64, i as u64),
            act(1, 11, i as u64, i as u64),
        );
        w.tick_after_ms(500);
        // Rank 1 computes (or sleeps, or reads stdin): not blocked in a receive.
        report(&mut w, act(0, 10, 3, 3), act(1, 0, 3, 3));
        w.tick_after_ms(500);
        // A message posted and not delivered (queued by a switched-out sender).
        report(&mut w, act(0, 10, 4, 3), act(1, 11, 3, 3));
        w.tick_after_ms(500);
    }
    assert!(w.view(1).deadlock.is_none());
    assert_eq!(w.view(1).state(), State::Running);
    assert_eq!(deadlocks(&w), 0);
}

#[test]
fn with_policy_kill_a_deadlocked_job_fails_saying_why() {
    let mut w = running(Some(DeadlockPolicy::Kill));
    report(&mut w, act(0, 10, 0, 0), act(1, 11, 0, 0));
    w.tick_after_ms(500);
    w.tick_after_ms(500);
    let signals = w.fx.take_signals(JobId(1));
    assert_eq!(signals.len(), 2, "both nodes told to kill: {signals:?}");
    for node in [(0, 0), (1, 0)] {
        w.running.remove(&node);
        let exit = crate::state::events::RankExit {
            job: JobId(1),
            rank: node.0,
            node,
            how: crate::state::events::ExitHow::Signal(9),
            abort: None,
            lost: vec![],
            usage: Default::default(),
        };
        w.step(|st, fx, now| reactor::on_rank_exit(st, fx, now, exit));
    }
    let v = w.view(1);
    assert_eq!(v.state(), State::Failed);
    assert!(
        v.reason.starts_with("deadlocked: all 2 ranks blocked"),
        "{}",
        v.reason
    );
    assert!(v.deadlock.is_some());
}

#[test]
fn a_report_for_a_rank_on_another_node_is_ignored() {
    let mut w = running(None);
    // Node (0,0) speaks for rank 1, which runs on (1,0): ignored, so never all fresh.
    w.activity
        .insert((0, 0), vec![act(0, 10, 0, 0), act(1, 11, 0, 0)]);
    for _ in 0..4 {
        w.tick_after_ms(500);
    }
    assert!(w.view(1).deadlock.is_none());
}

#[test]
fn a_fence_completes_once_every_rank_arrived_from_its_own_node() {
    let mut w = running(None);
    let arrive = |node, rank, k: &str| FenceArrival {
        node,
        job: JobId(1),
        rank,
        epoch: 1,
        puts: BTreeMap::from([(k.to_string(), format!("ep{rank}"))]),
    };
    let first = w.step(|st, fx, now| reactor::on_fence(st, fx, now, arrive((0, 0), 0, "ep.0")));
    assert_eq!(first.unwrap(), None, "rank 0 waits for rank 1");
    // Another node may not fence for rank 1.
    let wrong = w.step(|st, fx, now| reactor::on_fence(st, fx, now, arrive((0, 0), 1, "ep.1")));
    assert!(matches!(wrong, Err(MasterError::Forbidden(_))), "{wrong:?}");
    let last = w
        .step(|st, fx, now| reactor::on_fence(st, fx, now, arrive((1, 0), 1, "ep.1")))
        .unwrap()
        .expect("the last arrival completes the fence");
    assert_eq!(last.len(), 2);
    assert_eq!(
        w.fx.fences(),
        vec![(JobId(1), 1, last.clone())],
        "rank 0 is answered too"
    );
    // An unknown job, or one that is not running, is refused.
    let mut unknown = arrive((0, 0), 0, "x");
    unknown.job = JobId(9);
    let r = w.step(|st, fx, now| reactor::on_fence(st, fx, now, unknown));
    assert!(matches!(r, Err(MasterError::UnknownJob(_))), "{r:?}");
    // Epochs out of the agents' numbering (fuzz target `proto_fence`: the last one
    // overflowed the next fence's number when it completed).
    for epoch in [0, u32::MAX] {
        let mut bad = arrive((0, 0), 0, "x");
        bad.epoch = epoch;
        let r = w.step(|st, fx, now| reactor::on_fence(st, fx, now, bad));
        assert!(matches!(r, Err(MasterError::Invalid(_))), "{r:?}");
    }
}

#[test]
fn a_job_that_names_no_mpi_interface_gets_the_cluster_default_and_keeps_it() {
    let mut cfg = config(2, 2, 1);
    cfg.mpi = crate::job::Mpi::Pmix;
    let mut w = World::new(cfg);
    w.register_all();
    let mut a = new_job("2x1", 1000, 0);
    a.mpi = None;
    a.mpi_check = true;
    let mut b = new_job("2x1", 1000, 0);
    b.mpi = Some(crate::job::Mpi::Pmi2);
    for job in [a, b] {
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
            .unwrap();
    }
    let launched: Vec<_> = w.fx.take_launches(JobId(1));
    assert_eq!(launched.len(), 2);
    for (_, order) in &launched {
        assert_eq!((order.mpi, order.mpi_check), (crate::job::Mpi::Pmix, true));
    }
    let launched = w.fx.take_launches(JobId(2));
    assert_eq!(launched.len(), 2);
    for (_, order) in launched {
        assert_eq!((order.mpi, order.mpi_check), (crate::job::Mpi::Pmi2, false));
    }
    assert_eq!(w.view(1).mpi, crate::job::Mpi::Pmix);
    assert_eq!(w.view(2).mpi, crate::job::Mpi::Pmi2);
}
