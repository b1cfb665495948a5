//! A master restarted from what it saved: running jobs adopted until their agents report
//! them, ranks nobody reports lost after the timeout, and jobs whose launch reached no
//! agent queued again.

use super::S::*;
use super::{S, run};
use crate::job::State::*;
use crate::state::testkit::{World, config};

fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
}

/// A 4x4 job placed and saved, its launch orders never sent: the master died first.
const PLACED_THEN_RESTARTED: [S; 4] = [RegisterAll, Submit("4x4"), Launching(1, 16), Restart];

fn after_restart(steps: &[S]) -> Vec<S> {
    [&PLACED_THEN_RESTARTED[..], steps].concat()
}

#[test]
fn a_restarted_master_adopts_running_jobs_and_keeps_the_queue() {
    run(
        world(2),
        &[
            RegisterAll,
            Submit("4x4"),
            Submit("2x2"),
            Submit("4x4"),
            Start(1),
            Start(2),
            Queue(&[3]),
            Exit(2, 0, 0),
            Restart,
            State(1, Running),
            State(2, Running),
            Queue(&[3]),
            Slices(1, &[0]),
            RegisterAll,
            // Every rank was reported again: none is lost after the timeout.
            Wait(2500),
            State(1, Running),
            State(2, Running),
            ExitAll(2, 0),
            State(2, Completed),
            ExitAll(1, 0),
            State(1, Completed),
            Launching(3, 16),
            Start(3),
            ExitAll(3, 0),
        ],
    );
}

#[test]
fn after_a_restart_ranks_nobody_reports_are_lost_after_the_timeout() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("4x4"),
            Start(1),
            Restart,
            Silence((3, 3)),
            Register((0, 0)),
            Register((1, 0)),
            Wait(1000),
            State(1, Running),
            Wait(1500),
            // Only the agents that came back can be told (ranks 0 and 1 run there).
            Signalled(1, 2, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(
                1,
                "on node (2,0) was not found after a master or agent restart",
            ),
        ],
    );
}

#[test]
fn a_launch_that_reached_no_agent_before_a_restart_is_queued_again() {
    run(
        world(1),
        &after_restart(&[
            RegisterAll,
            Wait(1000),
            Launching(1, 0),
            Wait(1500),
            // Every agent is back and none runs a rank of it: placed again, launched anew.
            Launching(1, 16),
            Start(1),
            State(1, Running),
            ExitAll(1, 0),
            State(1, Completed),
        ]),
    );
}

#[test]
fn a_launch_maybe_on_a_node_not_back_after_a_restart_is_not_run_twice() {
    run(
        world(1),
        &after_restart(&[
            Register((0, 0)),
            Register((1, 0)),
            Wait(2500),
            // Its rank may run on the node that did not come back: lost, not relaunched
            // (the nodes that are back are told to kill whatever of it they run).
            Launching(1, 0),
            Signalled(1, 1, 0),
            State(1, Failed),
            Reason(1, "not found after a master or agent restart"),
        ]),
    );
}
