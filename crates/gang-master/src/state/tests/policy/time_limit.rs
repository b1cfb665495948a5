//! Time limits: lowered by users, raised by admins only.

use super::world;
use crate::job::State::*;
use crate::state::tests::S::*;
use crate::state::tests::run;

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
