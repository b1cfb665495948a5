//! Scheduler behaviour: slices, multiple tasks, MPL, backfilling, progress. Every step
//! is followed by the full invariant check.

use std::collections::HashMap;

use gang_core::*;
use proptest::prelude::*;

fn s(w: u32, h: u32) -> Shape {
    Shape::new(w, h)
}

struct Harness {
    sched: Scheduler,
    now: f64,
}

impl Harness {
    fn new(mesh: Shape, cfg: Config) -> Self {
        Harness {
            sched: Scheduler::new(mesh, cfg).unwrap(),
            now: 0.0,
        }
    }

    fn submit(&mut self, id: u64, shape: Shape, estimate: Option<f64>) -> Plan {
        let plan = self
            .sched
            .submit(
                self.now,
                JobSpec {
                    id: JobId(id),
                    shape,
                    estimate,
                    user: 0,
                },
            )
            .unwrap();
        self.sched.check_invariants().unwrap();
        plan
    }

    fn finish(&mut self, id: u64) -> Plan {
        let plan = self.sched.finish(self.now, JobId(id)).unwrap();
        self.sched.check_invariants().unwrap();
        plan
    }

    fn slices(&self) -> Vec<SliceId> {
        self.sched.matrix().slices().iter().map(|s| s.id).collect()
    }

    fn placement(&self, id: u64) -> Placement {
        self.sched.matrix().placement(JobId(id)).cloned().unwrap()
    }
}

fn start(job: u64, slice: u32, x: u32, y: u32, w: u32, h: u32) -> Decision {
    Decision::Start {
        job: JobId(job),
        slice: SliceId(slice),
        submesh: Submesh::new(x, y, w, h),
    }
}

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
            allocator: AllocatorKind::FirstFit,
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

/// A random workload on a small mesh.
fn workload() -> impl Strategy<Value = (Shape, Vec<WorkloadJob>)> {
    (2u32..=6, 2u32..=6).prop_flat_map(|(mw, mh)| {
        let job = (0.0f64..50.0, 1..=mw, 1..=mh, 0.0f64..40.0, 1.0f64..3.0);
        proptest::collection::vec(job, 1..40).prop_map(move |raw| {
            let mut t = 0.0;
            let jobs = raw
                .into_iter()
                .enumerate()
                .map(|(i, (gap, w, h, run, over))| {
                    t += gap;
                    WorkloadJob {
                        id: JobId(i as u64),
                        submit: t.floor(),
                        shape: Shape::new(w, h),
                        runtime: run.floor(),
                        // Estimates at or above the run time, as EASY assumes.
                        estimate: Some((run * over).ceil()),
                    }
                })
                .collect();
            (Shape::new(mw, mh), jobs)
        })
    })
}

fn config() -> impl Strategy<Value = Config> {
    (
        1u32..=4,
        prop::sample::select(AllocatorKind::ALL.to_vec()),
        prop::sample::select(vec![Backfill::None, Backfill::Easy]),
        any::<bool>(),
        prop::sample::select(vec![0.0, 0.05]),
        prop::sample::select(vec![SliceChoice::First, SliceChoice::Densest]),
    )
        .prop_map(
            |(mpl, allocator, backfill, multiple_tasks, switch_overhead, slice_choice)| Config {
                mpl,
                allocator,
                backfill,
                multiple_tasks,
                slice_choice,
                switch_overhead,
                backfill_depth: 1000,
                fair_share: true,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any workload: invariants hold after every step, every job runs exactly once and
    /// gets its whole run time, placement intervals never overlap within a slice, and
    /// under EASY no head starts after the reservation it was given.
    #[test]
    fn replay_keeps_every_invariant((mesh, jobs) in workload(), cfg in config()) {
        let jobs: Vec<WorkloadJob> = jobs
            .into_iter()
            .map(|mut j| {
                if !cfg.allocator.get().can_ever_fit(mesh, j.shape) {
                    j.shape = j.shape.rotated();
                }
                j
            })
            .collect();
        let mut sched = Scheduler::new(mesh, cfg.clone()).unwrap();
        let mut reserved: HashMap<JobId, f64> = HashMap::new();
        let mut tracker = IntervalTracker::default();
        let mut intervals = vec![];
        let mut failure = None;
        let outcomes = replay(&mut sched, &jobs, |sched, plan| {
            if failure.is_none() && let Err(e) = sched.check_invariants() {
                failure = Some(e);
            }
            for d in &plan.decisions {
                if let Decision::Reserve { job, at, .. } = *d {
                    reserved.entry(job).or_insert(at);
                }
            }
            tracker.apply(plan, |i| intervals.push(i));
        })
        .unwrap();
        prop_assert_eq!(failure, None);
        prop_assert!(tracker.is_empty());
        prop_assert_eq!(outcomes.len(), jobs.len());
        prop_assert_eq!(sched.matrix().slices().len(), 0);
        let by_id: HashMap<JobId, &WorkloadJob> = jobs.iter().map(|j| (j.id, j)).collect();
        for o in &outcomes {
            let j = by_id[&o.job];
            prop_assert!(o.start >= j.submit && o.end >= o.start);
            // Never faster than full speed.
            prop_assert!(o.end - o.start >= j.runtime - 1e-6, "{:?} ran faster than {}", o, j.runtime);
            if cfg.mpl == 1 {
                prop_assert!((o.end - o.start - j.runtime).abs() < 1e-6);
            }
            if let Some(&at) = reserved.get(&o.job) {
                prop_assert!(o.start <= at + 1e-6, "job {} reserved for {} started at {}", o.job, at, o.start);
            }
        }
        for (i, a) in intervals.iter().enumerate() {
            for b in &intervals[i + 1..] {
                let sa = Submesh::new(a.x, a.y, a.w, a.h);
                let sb = Submesh::new(b.x, b.y, b.w, b.h);
                let in_time = a.start < b.end && b.start < a.end;
                prop_assert!(!(a.slice == b.slice && in_time && sa.overlaps(sb)), "{:?} overlaps {:?}", a, b);
            }
        }
    }
}

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

#[derive(Debug, Clone)]
enum Op {
    Submit(u32, u32, Option<u8>),
    Finish(prop::sample::Index),
    Offline(u32, u32, bool),
    Wait(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=4, 1u32..=4, proptest::option::of(1u8..50)).prop_map(|(w, h, e)| Op::Submit(w, h, e)),
        3 => any::<prop::sample::Index>().prop_map(Op::Finish),
        2 => (0u32..4, 0u32..4, any::<bool>()).prop_map(|(x, y, o)| Op::Offline(x, y, o)),
        1 => (1u8..30).prop_map(Op::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Submissions, completions and nodes going offline and back in any order: every
    /// invariant holds after every step, no job is placed on an offline node, and once
    /// every node is back and every running job is finished, the queue drains.
    #[test]
    fn offline_nodes_never_break_invariants(ops in proptest::collection::vec(op(), 1..80), cfg in config()) {
        let mesh = Shape::new(4, 4);
        let mut sched = Scheduler::new(mesh, cfg.clone()).unwrap();
        let mut offline = std::collections::BTreeSet::new();
        let (mut now, mut next) = (0.0, 0u64);
        for op in ops {
            let plan = match op {
                Op::Submit(w, h, e) => {
                    next += 1;
                    let spec = JobSpec { id: JobId(next), shape: Shape::new(w, h), estimate: e.map(f64::from), user: (next % 3) as u32 };
                    sched.submit(now, spec).unwrap()
                }
                Op::Finish(i) => {
                    let running: Vec<JobId> = sched.matrix().placements().map(|(j, _)| j).collect();
                    if running.is_empty() { continue }
                    sched.finish(now, running[i.index(running.len())]).unwrap()
                }
                Op::Offline(x, y, o) => {
                    if o { offline.insert((x, y)); } else { offline.remove(&(x, y)); }
                    sched.set_node_offline(now, x, y, o).unwrap()
                }
                Op::Wait(dt) => { now += f64::from(dt); sched.advance(now).unwrap(); continue }
            };
            prop_assert_eq!(sched.check_invariants(), Ok(()));
            for (job, _, sm) in plan.started() {
                for n in sm.nodes() {
                    prop_assert!(!offline.contains(&n), "job {} started on offline node {:?}", job, n);
                }
            }
        }
        for (x, y) in std::mem::take(&mut offline) {
            sched.set_node_offline(now, x, y, false).unwrap();
        }
        // Finish everything: the queue must drain.
        for _ in 0..200 {
            let Some(j) = sched.matrix().placements().map(|(j, _)| j).next() else { break };
            now += 1.0;
            sched.finish(now, j).unwrap();
            prop_assert_eq!(sched.check_invariants(), Ok(()));
        }
        prop_assert_eq!(sched.queue().count(), 0);
        prop_assert_eq!(sched.matrix().running(), 0);
    }
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

fn started_by(plan: &Plan) -> Vec<u64> {
    plan.decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Start { job, .. } => Some(job.0),
            _ => None,
        })
        .collect()
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
