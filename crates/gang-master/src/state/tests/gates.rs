//! Held jobs, dependencies and arrays: gated out of the core's queue until they may run.

use gang_core::JobId;

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::events::NewJob;
use crate::state::reactor;
use crate::state::testkit::{World, config, new_job};

fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
}

fn deps(s: &'static str) -> fn(&mut NewJob) {
    // One function per dependency string used below (a fn pointer holds no data).
    match s {
        "afterok:1" => |j| j.dependency = gang_core::dependency::parse("afterok:1").unwrap(),
        "afternotok:1" => |j| j.dependency = gang_core::dependency::parse("afternotok:1").unwrap(),
        "afterany:2" => |j| j.dependency = gang_core::dependency::parse("afterany:2").unwrap(),
        "afterok:2" => |j| j.dependency = gang_core::dependency::parse("afterok:2").unwrap(),
        "after:3" => |j| j.dependency = gang_core::dependency::parse("after:3").unwrap(),
        _ => unreachable!("add it above"),
    }
}

#[test]
fn afterok_waits_for_success_and_chains() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            SubmitWith("2x2", deps("afterok:1")),
            SubmitWith("1x1", deps("afterany:2")),
            State(2, Queued),
            Pending(2, "dependency afterok:1: job 1 is starting"),
            Pending(3, "dependency afterany:2: job 2 is queued"),
            Queue(&[]),
            Start(1),
            Pending(2, "dependency afterok:1: job 1 is running"),
            ExitAll(1, 0),
            State(1, Completed),
            // Its dependency met, it is queued and, the mesh free, placed.
            State(2, Starting),
            State(3, Queued),
            Start(2),
            ExitAll(2, 3),
            Signalled(2, 3, 3000),
            State(2, Failed),
            // afterany: however it ended.
            State(3, Starting),
            Start(3),
            ExitAll(3, 0),
        ],
    );
}

#[test]
fn a_dependency_that_can_never_hold_ends_the_job_and_those_after_it() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            SubmitWith("1x1", deps("afterok:1")),
            SubmitWith("1x1", deps("afterok:2")),
            SubmitWith("1x1", deps("afternotok:1")),
            Start(1),
            ExitAll(1, 1),
            State(1, Failed),
            State(2, Cancelled),
            Reason(
                2,
                "dependency afterok:1 can never be met: job 1 ended without success",
            ),
            State(3, Cancelled),
            Reason(
                3,
                "dependency afterok:2 can never be met: job 2 ended without success",
            ),
            State(4, Starting),
            Start(4),
            Restart,
            State(2, Cancelled),
            State(4, Running),
            RegisterAll,
            ExitAll(4, 0),
        ],
    );
}

#[test]
fn after_waits_for_the_start_only() {
    run(
        world(2),
        &[
            RegisterAll,
            Submit("4x4"),
            Submit("4x4"),
            Submit("4x4"),
            SubmitWith("1x1", deps("after:3")),
            Pending(4, "dependency after:3: job 3 is queued"),
            Start(1),
            Start(2),
            ExitAll(1, 0),
            // Job 3 started: job 4 may be queued (behind nobody, in no slice yet: it waits
            // for room, not for job 3 to end).
            State(3, Starting),
            Pending(4, "resources"),
            Start(3),
            ExitAll(2, 0),
            State(4, Starting),
            Start(4),
            ExitAll(3, 0),
            ExitAll(4, 0),
        ],
    );
}

#[test]
fn held_jobs_wait_for_release_and_an_admins_hold_for_an_admin() {
    run(
        world(1),
        &[
            RegisterAll,
            SubmitWith("2x2", |j| j.at_submit.hold = true),
            State(1, Queued),
            Pending(1, "held by u1000 (gangctl release 1)"),
            Queue(&[]),
            // Held across a restart.
            Restart,
            RegisterAll,
            Pending(1, "held by u1000 (gangctl release 1)"),
            Update(1, 1000, Some(false), None, ""),
            State(1, Starting),
            Start(1),
            Update(
                1,
                1000,
                Some(true),
                None,
                "job 1 is running: only a queued job can be held",
            ),
            Submit("4x4"),
            Queue(&[2]),
            // An admin holds another user's job: that user cannot release it.
            Update(2, 0, Some(true), None, ""),
            Queue(&[]),
            Pending(2, "held by admin u0"),
            Update(2, 1000, Some(false), None, "only an admin may release it"),
            Update(2, 2000, Some(false), None, "may not update it"),
            Update(2, 0, Some(false), None, ""),
            Queue(&[2]),
            // Held again and cancelled while held.
            Update(2, 1000, Some(true), None, ""),
            Cancel(2, 1000, true),
            State(2, Cancelled),
        ],
    );
}

#[test]
fn time_limits_may_be_lowered_by_users_and_raised_by_admins() {
    run(
        world(1),
        &[
            RegisterAll,
            SubmitLimited("2x2", 600),
            Update(1, 1000, None, Some(300), ""),
            Update(1, 1000, None, Some(900), "only an admin may raise it"),
            Update(1, 1000, None, Some(0), "only an admin may raise it"),
            Update(1, 0, None, Some(3600), ""),
            Start(1),
            // Lowered below its run time, it ends at the next tick.
            Wait(1500),
            Update(1, 1000, None, Some(1), ""),
            Wait(200),
            Signalled(1, 4, 3000),
            KilledAll(1, 15),
            State(1, Timeout),
            // 124 as prun exits, not the 143 of the SIGTERM its ranks got.
            Code(1, Some(124)),
        ],
    );
}

#[test]
fn arrays_make_one_job_per_task_and_keep_to_their_limit() {
    let mut w = run(
        world(1),
        &[
            RegisterAll,
            SubmitWith("1x1", |j| {
                j.at_submit.array = Some(gang_core::array::parse("1-5%2", 100).unwrap());
                j.output_files.output = "out-%A_%a.%r".into();
            }),
            State(1, Starting),
            State(2, Starting),
            State(3, Queued),
            Pending(3, "array 1 runs at most 2 tasks at once"),
            Queue(&[]),
            Start(1),
            Start(2),
            ExitAll(1, 0),
            State(3, Starting),
            State(4, Queued),
            // Its ranks are told their task, in the environment and the output patterns.
            StartChecked(3, |order| {
                assert_eq!(order.output_files.output, "out-1_3.%r");
                let env = |k: &str| order.env.get(k).map(String::as_str);
                assert_eq!(env("GANG_ARRAY_TASK_ID"), Some("3"));
                assert_eq!(env("GANG_ARRAY_TASK_COUNT"), Some("5"));
                assert_eq!(env("GANG_ARRAY_TASK_MIN"), Some("1"));
                assert_eq!(env("GANG_ARRAY_TASK_MAX"), Some("5"));
            }),
        ],
    );
    let v = w.view(3);
    assert_eq!(v.array.map(|a| (a.job.0, a.task)), Some((1, 3)));
    assert_eq!(
        crate::service::convert::job_info(&v).spec.unwrap().output,
        "out-1_3.%r"
    );
    assert_eq!(w.view(1).array_tasks, 5);
    // One spec for all five, in memory and saved: the tasks' rows name it.
    assert!(std::sync::Arc::ptr_eq(
        &w.view(1).record.spec,
        &w.view(5).record.spec
    ));
    assert_eq!(w.fx.specs.len(), 1);
    let row = &w.fx.db[&4];
    assert_eq!(row.spec_of, Some(JobId(1)));
    assert!(row.argv.is_empty(), "the row holds no copy of the command");
    // After a restart the limit still holds: tasks 2 and 3 run, 4 and 5 wait.
    let argv = w.view(4).argv.clone();
    w = w.restart();
    w.register_all();
    assert_eq!(w.view(4).argv, argv, "the array's spec put back");
    assert_eq!(w.view(4).state(), Queued);
    assert_eq!(
        w.view(5).pending_reason,
        "array 1 runs at most 2 tasks at once"
    );
}

#[test]
fn bad_dependencies_and_arrays_are_refused_with_the_limit() {
    let mut w = run(world(1), &[RegisterAll]);
    let refused = |w: &mut World, change: fn(&mut NewJob)| {
        let mut j = new_job("1x1", 1000, 0);
        change(&mut j);
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, j))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = refused(&mut w, |j| {
        j.dependency = gang_core::dependency::parse("afterok:7").unwrap()
    });
    assert!(e.contains("afterok:7: there is no job 7 of yours"), "{e}");
    // Another user's job: refused in the same words (nothing of it is told).
    let theirs = {
        let j = new_job("1x1", 1001, 0);
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, j))
            .unwrap()
            .id
    };
    let e = {
        let mut j = new_job("1x1", 1000, 0);
        j.dependency = gang_core::dependency::parse(&format!("afterok:{theirs}")).unwrap();
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, j))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        e,
        format!("spec.dependency: afterok:{theirs}: there is no job {theirs} of yours")
    );
    let e = refused(&mut w, |j| {
        j.at_submit.array = Some(gang_core::array::parse("1-2000", 5000).unwrap())
    });
    assert!(
        e.contains("2000 tasks; the limit is 1001 (max_array_tasks)"),
        "{e}"
    );
    let e = refused(&mut w, |j| j.output_files.output = "x-%a".into());
    assert!(e.contains("not an array"), "{e}");
    assert!(
        w.st.view(JobId(theirs.0 + 1), w.now).is_err(),
        "nothing was made but job {theirs}"
    );
}
