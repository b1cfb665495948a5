//! The cases: each a story told as steps and expectations.

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::testkit::{GRACE_MS, World, config};

fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
}

#[test]
fn a_job_is_placed_launched_runs_and_completes() {
    let w = run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            State(1, Starting),
            Launching(1, 4),
            Start(1),
            State(1, Running),
            Rank0(1),
            Slices(1, &[0]),
            Tables(1),
            Exit(1, 0, 0),
            State(1, Running),
            ExitAll(1, 0),
            State(1, Completed),
            Code(1, Some(0)),
            Queue(&[]),
        ],
    );
    // Launch orders carry the job's resolved mode and no GANG_MASTER of the submitter.
    let saved = &w.fx.db[&1];
    assert_eq!(saved.state(), Completed);
    assert!(saved.end_ns >= saved.start_ns && saved.start_ns >= saved.submit_ns);
}

#[test]
fn launch_orders_are_complete() {
    let mut w = run(world(1), &[RegisterAll]);
    let job = crate::state::testkit::new_job("2x2", 1000, 0);
    w.step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, job))
        .unwrap();
    let mut launches = w.fx.take_launches(gang_core::JobId(1));
    launches.sort_by_key(|(_, o)| o.rank);
    let nodes: Vec<_> = launches.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        nodes,
        vec![(0, 0), (1, 0), (0, 1), (1, 1)],
        "rank r on node r, row-major"
    );
    for (_, o) in &launches {
        assert_eq!((o.size, o.owner.uid, o.owner.gid), (4, 1000, 1000));
        assert_eq!(
            o.gang,
            gang_core::GangMode::Stop,
            "the cluster default, resolved"
        );
        assert!(!o.env.contains_key("GANG_MASTER"));
    }
}

#[test]
fn a_failing_rank_stops_the_others_and_names_itself() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            Start(1),
            Exit(1, 2, 3),
            // The three others are told to stop, with the grace period.
            Signalled(1, 3, GRACE_MS),
            State(1, Running),
            KilledAll(1, 15),
            State(1, Failed),
            Code(1, Some(3)),
            Reason(1, "rank 2 on node (0,1) exited with code 3"),
        ],
    );
}

#[test]
fn a_rank_that_cannot_start_fails_the_job_at_once() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            LaunchFails(1, 1),
            // No grace: nothing of the job should run on. The three others are signalled
            // at the failure, and again as each launch is confirmed (a signal that reached
            // the agent before the rank was there found nothing to stop).
            Signalled(1, 6, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Code(1, None),
            Reason(1, "node (1,0): cannot start"),
        ],
    );
}

#[test]
fn cancelling_a_queued_job_frees_its_place_in_the_queue() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("4x4"),
            Submit("4x4"),
            Submit("1x1"),
            Queue(&[2, 3]),
            Cancel(2, 1001, false),
            Cancel(2, 1000, true),
            State(2, Cancelled),
            Reason(2, "cancelled by u1000"),
            Queue(&[3]),
            Start(1),
            ExitAll(1, 0),
            // The freed mesh goes to the next in line.
            Launching(3, 1),
            Start(3),
            ExitAll(3, 0),
            State(3, Completed),
        ],
    );
}

#[test]
fn cancelling_a_running_job_signals_every_rank_with_grace() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            Start(1),
            Cancel(1, 1001, false),
            Cancel(1, 1000, true),
            Signalled(1, 4, GRACE_MS),
            // A second cancel while it is torn down sends nothing more.
            Cancel(1, 1000, true),
            KilledAll(1, 15),
            State(1, Cancelled),
            Code(1, Some(143)),
            Reason(1, "cancelled by u1000"),
        ],
    );
}

#[test]
fn cancelling_a_switched_out_job_leaves_the_other_slice_running() {
    run(
        world(2),
        &[
            RegisterAll,
            Submit("4x4"),
            Submit("4x4"),
            Start(1),
            Start(2),
            Slices(1, &[0]),
            Slices(2, &[1]),
            Tables(2),
            Cancel(2, 0, true),
            // Agents continue a stopped job before they signal it.
            Signalled(2, 16, GRACE_MS),
            KilledAll(2, 15),
            State(2, Cancelled),
            State(1, Running),
            Tables(1),
        ],
    );
}

#[test]
fn a_silent_node_fails_its_jobs_frees_their_nodes_and_rejoins() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("2x2"),
            Start(1),
            Silence((1, 1)),
            Wait(1500),
            State(1, Running),
            Wait(1000),
            Signalled(1, 3, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(1, "node (1,1) lost: its agent was silent for 2000 ms"),
            // Its submesh is free again, but not the lost node.
            Submit("4x4"),
            Queue(&[2]),
            Submit("2x2"),
            Launching(3, 4),
            Start(3),
            // The agent comes back still running a rank of the failed job: it must go.
            RegisterKills((1, 1), &[1]),
            ExitAll(3, 0),
            Launching(2, 16),
            Start(2),
            ExitAll(2, 0),
            State(2, Completed),
        ],
    );
}

#[test]
fn a_drained_node_takes_no_new_job_until_resumed() {
    run(
        world(1),
        &[
            RegisterAll,
            Drain((0, 0), true),
            Submit("4x4"),
            Queue(&[1]),
            Launching(1, 0),
            Restart,
            RegisterAll,
            Queue(&[1]),
            Drain((0, 0), false),
            Launching(1, 16),
            Start(1),
            ExitAll(1, 0),
        ],
    );
}

#[test]
fn a_time_limit_counts_run_time_not_time_switched_out() {
    run(
        world(2),
        &[
            RegisterAll,
            SubmitLimited("4x4", 1),
            Submit("4x4"),
            Start(1),
            Start(2),
            // Half the slots each: 1.5 s of wall time is about 0.75 s of run time.
            Wait(1500),
            State(1, Running),
            Wait(1000),
            Signalled(1, 16, GRACE_MS),
            KilledAll(1, 15),
            State(1, Timeout),
            Reason(1, "time limit of 1 s reached"),
            State(2, Running),
        ],
    );
}

#[test]
fn a_job_alone_reaches_its_limit_in_wall_time() {
    run(
        world(2),
        &[
            RegisterAll,
            SubmitLimited("4x4", 1),
            Start(1),
            Wait(900),
            State(1, Running),
            Wait(200),
            Signalled(1, 16, GRACE_MS),
        ],
    );
}

/// Found by fuzzing (`proto_submit`): a limit whose nanoseconds overflow i64 panicked the
/// tick in debug builds and, wrapped in release, cancelled the job at once.
#[test]
fn a_time_limit_beyond_i64_nanoseconds_is_never_reached() {
    run(
        world(2),
        &[
            RegisterAll,
            SubmitLimited("2x2", u64::MAX),
            SubmitLimited("2x2", 1 << 63),
            SubmitLimited("2x2", 10_000_000_000),
            Start(1),
            Start(2),
            Start(3),
            Wait(2000),
            State(1, Running),
            State(2, Running),
            State(3, Running),
        ],
    );
}

/// Found by fuzzing (`proto_rank_exit`): an agent's bogus signal number overflowed the
/// exit code (a panic of the state task in debug builds).
#[test]
fn a_bogus_signal_number_fails_the_job_without_overflow() {
    run(
        world(1),
        &[
            RegisterAll,
            Submit("1x1"),
            Start(1),
            KilledAll(1, i32::MAX),
            State(1, Failed),
            Code(1, Some(i32::MAX)),
            Reason(1, "killed by signal 2147483647"),
        ],
    );
}

#[test]
fn tables_reach_every_agent_and_a_lost_one_is_sent_again() {
    run(
        world(2),
        &[
            RegisterAll,
            Submit("4x4"),
            Start(1),
            Tables(1),
            Lose((2, 2), true),
            Submit("4x4"),
            Start(2),
            Behind((2, 2)),
            Lose((2, 2), false),
            // The next heartbeat shows it behind; after the resend delay it gets the table.
            Wait(1000),
            Tables(2),
            ExitAll(1, 0),
            ExitAll(2, 0),
            Tables(0),
        ],
    );
}

#[test]
fn a_queued_job_says_why_it_waits() {
    run(
        world(1),
        &[
            RegisterAll,
            Drain((1, 0), true),
            // Only the drained node keeps a 4x4 out: it waits for that node.
            Submit("4x4"),
            State(1, Queued),
            Pending(1, "waiting for node (1,0): drained"),
            // It does not hold up a job that fits around the node.
            Submit("4x2"),
            Start(2),
            Pending(2, ""),
            // Next in line, nothing free fits: resources; behind it: priority.
            Submit("4x2"),
            Submit("1x1"),
            Pending(3, "resources"),
            Pending(4, "priority"),
            // The node back: job 1 is the head again, and waits for job 2's nodes.
            Drain((1, 0), false),
            Pending(1, "resources"),
            Pending(3, "priority"),
            Cancel(2, 1000, true),
            Signalled(2, 8, GRACE_MS),
            KilledAll(2, 15),
            State(2, Cancelled),
            State(1, Starting),
            Pending(1, ""),
            Start(1),
        ],
    );
}

#[test]
fn a_job_past_its_limit_ends_as_timeout_even_across_a_restart() {
    run(
        world(1),
        &[
            RegisterAll,
            SubmitLimited("2x2", 1),
            Start(1),
            Wait(1100),
            Signalled(1, 4, GRACE_MS),
            // The master restarts before the ranks are gone: it still knows why.
            Restart,
            RegisterAll,
            KilledAll(1, 15),
            State(1, Timeout),
            Reason(1, "time limit of 1 s reached"),
        ],
    );
}

#[test]
fn slices_have_ids_that_climb_and_places_that_do_not() {
    let w = run(
        world(2),
        &[
            RegisterAll,
            Submit("4x4"),
            Submit("4x4"),
            Start(1),
            Start(2),
            ExitAll(1, 0),
            Submit("4x4"),
            Start(3),
            Slices(2, &[1]),
            Slices(3, &[2]),
            // The newest table takes effect a lead ahead.
            Wait(200),
        ],
    );
    assert_eq!(w.view(2).slice_rows, [0]);
    assert_eq!(w.view(3).slice_rows, [1]);
    let m = w.st.matrix_view(w.now);
    let t = m.table.expect("a table in force");
    assert!(t.seq >= 1 && t.seq < 10, "a short count: {t:?}");
}

/// A new slice table takes effect the configured lead ahead plus two of the longest round
/// trips the agents' clock probes see (twice the error bound each reports), so that an
/// agent behind a slow link has it in time; the lead shrinks back when the link is fast.
#[test]
fn tables_take_effect_further_ahead_while_an_agent_is_behind_a_slow_link() {
    use crate::state::events::ClockReport;
    use crate::state::testkit::{LEAD_MS, QUANTUM_MS, new_job};
    let mut w = World::new(config(2, 1, 4));
    w.register_all();
    let ms = 1_000_000;
    let lead_of_next_table = |w: &mut World| {
        let job = new_job("1x1", 1000, 0);
        w.step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, job))
            .unwrap();
        let tables = w.fx.take_tables();
        let (_, t) = tables.last().expect("a new table");
        t.effective_ns - w.now.wall_ns
    };
    let fast = lead_of_next_table(&mut w);
    assert!(fast >= i64::from(LEAD_MS) * ms, "{fast}");
    assert!(fast < i64::from(LEAD_MS + QUANTUM_MS) * ms, "{fast}");
    // A 100 ms round trip to (1,0): error bound 50 ms.
    w.clocks.insert(
        (1, 0),
        ClockReport {
            offset_ns: 0,
            error_ns: 50 * ms,
            from_host: false,
        },
    );
    w.heartbeats();
    let slow = lead_of_next_table(&mut w);
    assert!(slow >= i64::from(LEAD_MS) * ms + 200 * ms, "{slow}");
    assert!(
        slow < i64::from(LEAD_MS + QUANTUM_MS) * ms + 200 * ms,
        "{slow}"
    );
    // An agent's bogus error is bounded: a table is never more than a second later.
    w.clocks.insert(
        (1, 0),
        ClockReport {
            offset_ns: 0,
            error_ns: i64::MAX,
            from_host: false,
        },
    );
    w.heartbeats();
    let bogus = lead_of_next_table(&mut w);
    assert!(
        bogus < i64::from(LEAD_MS + QUANTUM_MS) * ms + 1000 * ms,
        "{bogus}"
    );
    // Fast again (once the pending table took effect: until then a new one would replace
    // it at its instant, agents holding at most one table ahead).
    w.clocks.clear();
    w.tick_after_ms(1500);
    let fast = lead_of_next_table(&mut w);
    assert!(fast < i64::from(LEAD_MS + QUANTUM_MS) * ms, "{fast}");
}
