//! Offline nodes, adopted jobs, why a queued job waits, fair share between users.

use super::*;

#[test]
fn offline_nodes_take_no_new_jobs_until_back() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 2,
            ..Config::default()
        },
    );
    h.sched.set_node_offline(0.0, 0, 0, true).unwrap();
    h.sched.check_invariants().unwrap();
    // A 4x4 job cannot go anywhere while (0,0) is offline, not even in a new slice.
    let p = h.submit(1, s(4, 4), None);
    assert!(p.is_empty());
    // A 2x2 job goes around the offline node: first base clear of it in row-major order.
    let p = h.sched.set_node_offline(0.0, 0, 0, false).unwrap();
    h.sched.check_invariants().unwrap();
    assert_eq!(
        p.started().next(),
        Some((JobId(1), SliceId(0), Submesh::new(0, 0, 4, 4)))
    );
    h.finish(1);
    h.sched.set_node_offline(0.0, 1, 1, true).unwrap();
    let p = h.submit(2, s(2, 2), None);
    assert_eq!(
        p.started().next().map(|x| x.2),
        Some(Submesh::new(2, 0, 2, 2))
    );
    assert!(matches!(
        h.sched.set_node_offline(0.0, 4, 0, true),
        Err(SchedError::NoSuchNode { .. })
    ));
}

#[test]
fn adopt_puts_running_jobs_back_where_they_run() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 2,
            ..Config::default()
        },
    );
    let spec = |id, shape| JobSpec {
        id: JobId(id),
        shape,
        estimate: None,
        user: 0,
    };
    h.sched
        .adopt(0.0, spec(1, s(2, 2)), Submesh::new(2, 2, 2, 2))
        .unwrap();
    h.sched
        .adopt(0.0, spec(2, s(4, 4)), Submesh::new(0, 0, 4, 4))
        .unwrap();
    h.sched.check_invariants().unwrap();
    assert_eq!(h.placement(1).submesh, Submesh::new(2, 2, 2, 2));
    assert_eq!(h.placement(2).home, SliceId(1));
    // No third slice: a third overlapping job cannot be put back.
    let e = h
        .sched
        .adopt(0.0, spec(3, s(1, 1)), Submesh::new(2, 2, 1, 1))
        .unwrap_err();
    assert!(matches!(e, SchedError::CannotAdopt { .. }), "{e}");
    assert_eq!(
        h.sched
            .adopt(0.0, spec(1, s(1, 1)), Submesh::new(0, 0, 1, 1))
            .unwrap_err(),
        SchedError::Duplicate(JobId(1))
    );
    h.sched.check_invariants().unwrap();
}

#[test]
fn a_job_only_offline_nodes_keep_out_does_not_block_the_queue() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 1,
            ..Config::default()
        },
    );
    h.sched.set_node_offline(0.0, 3, 3, true).unwrap();
    let p = h.submit(1, s(4, 4), None);
    assert!(p.is_empty(), "held: needs the offline node");
    let p = h.submit(2, s(2, 2), None);
    assert_eq!(
        p.started().next().map(|x| x.0),
        Some(JobId(2)),
        "job 2 goes around the held job"
    );
    // Back in service: job 1 is the head again and waits for job 2's nodes (FCFS).
    h.sched.set_node_offline(0.0, 3, 3, false).unwrap();
    h.sched.check_invariants().unwrap();
    assert!(h.submit(3, s(1, 1), None).is_empty());
    let p = h.finish(2);
    assert_eq!(p.started().next().map(|x| x.0), Some(JobId(1)));
}

#[test]
fn a_queued_job_says_why_it_waits() {
    let mut h = Harness::new(
        s(4, 4),
        Config {
            mpl: 1,
            ..Config::default()
        },
    );
    h.sched.set_node_offline(0.0, 1, 0, true).unwrap();
    h.submit(1, s(4, 4), None);
    // Only the drained node keeps it out, and it is named.
    assert_eq!(
        h.sched.pending(JobId(1)),
        Some(Pending::Node { x: 1, y: 0 })
    );
    h.submit(2, s(4, 2), None);
    assert!(h.sched.matrix().placement(JobId(2)).is_some());
    // Head of the placeable jobs, nothing free: resources; behind it: priority.
    h.submit(3, s(4, 2), None);
    h.submit(4, s(1, 1), None);
    assert_eq!(h.sched.pending(JobId(3)), Some(Pending::Resources));
    assert_eq!(h.sched.pending(JobId(4)), Some(Pending::Priority(JobId(3))));
    let all = h.sched.pending_all();
    assert_eq!(
        all,
        [
            (JobId(1), Pending::Node { x: 1, y: 0 }),
            (JobId(3), Pending::Resources),
            (JobId(4), Pending::Priority(JobId(3)))
        ]
    );
    // Running jobs and unknown ones are not pending.
    assert_eq!(h.sched.pending(JobId(2)), None);
    assert_eq!(h.sched.pending(JobId(9)), None);
}

/// Fair share: on a full machine, the other user's job is the next to start, and then
/// the flooder's again in submission order.
#[test]
fn the_scheduler_starts_the_other_users_job_next() {
    let cfg = Config {
        mpl: 1,
        ..Config::default()
    };
    let mut s = Scheduler::new(Mesh::new(1, 1), cfg).unwrap();
    let job = |id: u64, user: u32| JobSpec {
        id: JobId(id),
        shape: Shape::new(1, 1),
        estimate: None,
        user,
    };
    for id in 1..=40 {
        s.submit(id as f64, job(id, 7)).unwrap();
    }
    s.submit(41.0, job(41, 8)).unwrap();
    let plan = s.finish(42.0, JobId(1)).unwrap();
    assert_eq!(started_by(&plan), [41]);
    s.check_invariants().unwrap();
    // Then the flooder again, in submission order.
    let plan = s.finish(43.0, JobId(41)).unwrap();
    assert_eq!(started_by(&plan), [2]);
    s.check_invariants().unwrap();
}
