//! Placement into slices, MPL, multiple tasks, progress, backfilling, bad requests.

use super::*;

#[test]
fn slices_are_created_up_to_mpl_then_jobs_wait() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 2,
            ..Config::default()
        },
    );
    let p = h.submit(1, s(4, 4), None);
    assert_eq!(
        p.decisions,
        vec![
            Decision::NewSlice { slice: SliceId(0) },
            start(1, 0, 0, 0, 4, 4)
        ]
    );
    let p = h.submit(2, s(4, 4), None);
    assert_eq!(
        p.decisions,
        vec![
            Decision::NewSlice { slice: SliceId(1) },
            start(2, 1, 0, 0, 4, 4)
        ]
    );
    let p = h.submit(3, s(1, 1), None);
    assert!(p.is_empty(), "MPL 2 reached: job 3 must wait, got {p:?}");
    assert_eq!(
        h.sched.queue().map(|q| q.id).collect::<Vec<_>>(),
        vec![JobId(3)]
    );
    // Job 1 ends: its slice is eliminated, and job 3 gets a new one.
    let p = h.finish(1);
    assert_eq!(
        p.decisions,
        vec![
            Decision::Free {
                job: JobId(1),
                submesh: Submesh::new(0, 0, 4, 4)
            },
            Decision::DropSlice { slice: SliceId(0) },
            Decision::NewSlice { slice: SliceId(2) },
            start(3, 2, 0, 0, 1, 1),
        ]
    );
    assert_eq!(h.slices(), vec![SliceId(1), SliceId(2)]);
}

#[test]
fn a_job_goes_into_the_first_slice_where_it_fits() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 3,
            ..Config::default()
        },
    );
    h.submit(1, s(4, 2), None); // s0 bottom half
    h.submit(2, s(4, 4), None); // s1
    let p = h.submit(3, s(2, 2), None); // fits s0 top half
    assert_eq!(
        p.started().collect::<Vec<_>>(),
        vec![(JobId(3), SliceId(0), Submesh::new(0, 2, 2, 2))]
    );
    assert_eq!(h.slices().len(), 2);
}

#[test]
fn mpl_one_is_pure_space_sharing() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 1,
            ..Config::default()
        },
    );
    h.submit(1, s(2, 4), None);
    h.submit(2, s(4, 4), None);
    h.submit(3, s(2, 4), None); // would fit beside job 1, but job 2 is the head: FCFS
    assert_eq!(h.slices().len(), 1);
    assert_eq!(h.sched.queue().count(), 2);
    h.finish(1);
    assert_eq!(h.placement(2).submesh, Submesh::new(0, 0, 4, 4));
    assert_eq!(h.sched.queue().count(), 1);
}

#[test]
fn multiple_tasks_fill_free_nodes_and_yield_to_new_jobs() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 2,
            ..Config::default()
        },
    );
    h.submit(1, s(2, 4), None); // s0 (0,0)
    h.submit(2, s(2, 4), None); // s0 (2,0)
    let p = h.submit(3, s(2, 2), None); // s1 (0,0)
    assert_eq!(h.placement(3).home, SliceId(1));
    // s1's right half is free, where job 2's nodes are: job 2 also runs there.
    assert!(p.decisions.contains(&Decision::AddSlot {
        job: JobId(2),
        slice: SliceId(1)
    }));
    assert_eq!(h.sched.rate(JobId(2)), Some(1.0));
    // Job 1 ends: its nodes are free in s0, where job 3's nodes are, so job 3 runs in
    // both slots.
    let p = h.finish(1);
    assert!(p.decisions.contains(&Decision::AddSlot {
        job: JobId(3),
        slice: SliceId(0)
    }));
    assert_eq!(h.placement(3).extra, vec![SliceId(0)]);
    assert_eq!(h.sched.rate(JobId(3)), Some(1.0));
    // A new 2x4 job takes s0's left half back from job 3's extra slot.
    let p = h.submit(4, s(2, 4), None);
    assert_eq!(
        &p.decisions[..2],
        &[
            Decision::RemoveSlot {
                job: JobId(3),
                slice: SliceId(0)
            },
            start(4, 0, 0, 0, 2, 4),
        ]
    );
    assert_eq!(h.sched.rate(JobId(3)), Some(0.5));
    // Job 3 (the only home job of s1) ends: s1 goes, and job 2's extra slot with it.
    let p = h.finish(3);
    assert!(p.decisions.contains(&Decision::RemoveSlot {
        job: JobId(2),
        slice: SliceId(1)
    }));
    assert!(
        p.decisions
            .contains(&Decision::DropSlice { slice: SliceId(1) })
    );
    assert_eq!(h.slices(), vec![SliceId(0)]);
}

#[test]
fn multiple_tasks_can_be_turned_off() {
    let cfg = Config {
        mpl: 2,
        multiple_tasks: false,
        ..Config::default()
    };
    let mut h = Harness::new(s(4, 4), cfg);
    h.submit(1, s(2, 4), None);
    h.submit(2, s(2, 4), None);
    h.submit(3, s(2, 2), None);
    let p = h.finish(1);
    assert!(
        !p.decisions
            .iter()
            .any(|d| matches!(d, Decision::AddSlot { .. }))
    );
    assert_eq!(h.sched.rate(JobId(3)), Some(0.5));
}

#[test]
fn progress_follows_the_time_share() {
    let cfg = Config {
        mpl: 2,
        switch_overhead: 0.1,
        ..Config::default()
    };
    let mut h = Harness::new(s(4, 4), cfg);
    h.submit(1, s(4, 4), None);
    h.now = 10.0;
    h.submit(2, s(4, 4), None);
    h.now = 20.0;
    h.sched.advance(20.0).unwrap();
    assert_eq!(h.sched.work_done(JobId(1)), Some(10.0 + 10.0 * 0.5 * 0.9));
    assert_eq!(h.sched.work_done(JobId(2)), Some(10.0 * 0.5 * 0.9));
    assert!(matches!(
        h.sched.advance(19.0),
        Err(SchedError::TimeWentBack { .. })
    ));
}

#[test]
fn easy_backfills_short_jobs_and_jobs_clear_of_the_reservation() {
    let cfg = Config {
        mpl: 1,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut h = Harness::new(s(4, 4), cfg);
    h.submit(1, s(2, 4), Some(100.0)); // (0,0)
    h.submit(2, s(1, 4), Some(1000.0)); // (2,0)
    h.submit(3, s(2, 4), Some(10.0)); // head: needs job 1's nodes, reserved at t=100
    // Ends (at the latest) at 50 < 100: may use the reserved nodes' neighbours now.
    let p = h.submit(4, s(1, 4), Some(50.0));
    assert_eq!(p.started().count(), 1, "{p:?}");
    assert!(p.decisions.contains(&Decision::Reserve {
        job: JobId(3),
        at: 100.0,
        slice: SliceId(0),
        submesh: Submesh::new(0, 0, 2, 4),
    }));
    h.finish(4);
    // Runs too long, but keeps clear of the reserved submesh: also starts.
    let p = h.submit(5, s(1, 4), Some(5000.0));
    assert_eq!(
        p.started().next().map(|s| s.2),
        Some(Submesh::new(3, 0, 1, 4))
    );
    // Would need the reserved nodes past t=100: waits.
    h.finish(5);
    h.submit(6, s(2, 2), Some(5000.0));
    h.submit(7, s(1, 1), Some(5000.0));
    assert_eq!(
        h.sched.queue().map(|q| q.id.0).collect::<Vec<_>>(),
        vec![3, 6]
    );
    assert_eq!(h.placement(7).submesh, Submesh::new(3, 0, 1, 1));
    // With FCFS, nothing overtakes the head.
    let mut f = Harness::new(
        s(4, 4),
        Config {
            mpl: 1,
            ..Config::default()
        },
    );
    f.submit(1, s(2, 4), Some(100.0));
    f.submit(2, s(1, 4), Some(1000.0));
    f.submit(3, s(2, 4), Some(10.0));
    assert!(f.submit(4, s(1, 4), Some(50.0)).is_empty());
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let mut h = Harness::new(
        s(4, 2),
        Config {
            placer: PlacerKind::FirstFit,
            ..Config::default()
        },
    );
    let spec = |id, shape| JobSpec {
        id: JobId(id),
        shape,
        estimate: None,
        user: 0,
    };
    let e = h.sched.submit(0.0, spec(1, s(2, 4))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job 1 asks 2x4 but the mesh is 4x2 (first-fit does not rotate requests)"
    );
    h.sched.submit(0.0, spec(1, s(1, 1))).unwrap();
    assert_eq!(
        h.sched.submit(0.0, spec(1, s(1, 1))).unwrap_err(),
        SchedError::Duplicate(JobId(1))
    );
    assert_eq!(
        h.sched.finish(0.0, JobId(9)).unwrap_err(),
        SchedError::UnknownJob(JobId(9))
    );
    assert!(
        Scheduler::new(
            s(4, 4),
            Config {
                mpl: 0,
                ..Config::default()
            }
        )
        .is_err()
    );
    h.sched.check_invariants().unwrap();
}

#[test]
fn cancel_of_a_queued_job_removes_it() {
    let mut h = Harness::new(
        s(2, 2),
        Config {
            mpl: 1,
            ..Config::default()
        },
    );
    h.submit(1, s(2, 2), None);
    h.submit(2, s(2, 2), None);
    let p = h.finish(2);
    assert!(p.is_empty());
    assert_eq!(h.sched.queue().count(), 0);
}
