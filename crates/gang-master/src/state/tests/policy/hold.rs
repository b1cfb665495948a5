//! Holds: a held job waits for its release; an admin's hold for an admin.

use super::world;
use crate::job::State::*;
use crate::state::tests::S::*;
use crate::state::tests::run;

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
fn a_held_array_task_is_released_by_its_name() {
    run(
        world(1),
        &[
            RegisterAll,
            SubmitWith("1x1", |j| {
                j.at_submit.hold = true;
                j.at_submit.array = Some(gang_core::schedule::array::parse("4-6", 100).unwrap());
            }),
            Pending(2, "held by u1000 (gangctl release 1_5)"),
        ],
    );
}

#[test]
fn a_job_that_is_not_held_is_not_released() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("4x4"),
            Start(1),
            Update(
                1,
                1000,
                Some(false),
                None,
                "job 1 is running and was never held: nothing to release",
            ),
            // The mesh is full: job 2 waits, queued, not held.
            Submit("2x2"),
            State(2, Queued),
            Update(
                2,
                1000,
                Some(false),
                None,
                "job 2 is queued and not held: nothing to release",
            ),
            // Held, it is released once; a second release has nothing to do.
            Update(2, 1000, Some(true), None, ""),
            Update(2, 1000, Some(false), None, ""),
            Update(
                2,
                1000,
                Some(false),
                None,
                "job 2 is queued and not held: nothing to release",
            ),
            // Ended: as before, already ended.
            Cancel(2, 1000, true),
            Update(2, 1000, Some(false), None, "job 2 already cancelled"),
        ],
    );
}
