//! Random workloads and operation sequences: the invariants hold after every step.

use super::*;

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
        prop::sample::select(PlacerKind::ALL.to_vec()),
        prop::sample::select(vec![Backfill::None, Backfill::Easy]),
        any::<bool>(),
        prop::sample::select(vec![0.0, 0.05]),
        prop::sample::select(vec![SliceChoice::First, SliceChoice::Densest]),
    )
        .prop_map(
            |(mpl, placer, backfill, multiple_tasks, switch_overhead, slice_choice)| Config {
                mpl,
                placer,
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
                if !cfg.placer.get().can_ever_fit(mesh, j.shape) {
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
