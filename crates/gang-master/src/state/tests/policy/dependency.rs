//! Dependencies: a job waits for the jobs it names, and ends if they can never be as it asks.

use gang_core::JobId;

use super::{deps, world};
use crate::job::State::*;
use crate::state::events::NewJob;
use crate::state::reactor;
use crate::state::testkit::{World, new_job};
use crate::state::tests::S::*;
use crate::state::tests::run;

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
        j.dependency = gang_core::schedule::dependency::parse("afterok:7").unwrap()
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
        j.dependency =
            gang_core::schedule::dependency::parse(&format!("afterok:{theirs}")).unwrap();
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
        j.at_submit.array = Some(gang_core::schedule::array::parse("1-2000", 5000).unwrap())
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
