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
    assert_eq!(saved.state, Completed);
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
fn bad_submissions_are_refused_and_change_nothing() {
    let w = run(
        world(1),
        &[
            RegisterAll,
            Refused("5x5", "job asks 5x5 but the mesh is 4x4"),
            Refused("0x2", ""),
            Queue(&[]),
            Submit("1x1"),
            Start(1),
            ExitAll(1, 0),
        ],
    );
    assert_eq!(w.view(1).shape, "1x1", "refusals used no job id");
}

#[test]
fn users_see_and_cancel_only_their_own_jobs_admins_all() {
    run(
        world(2),
        &[
            RegisterAll,
            SubmitAs("2x2", 1000),
            SubmitAs("2x2", 1001),
            Sees(1000, &[1]),
            Sees(1001, &[2]),
            Sees(999, &[2, 1]),
            Sees(0, &[2, 1]),
            Hidden(1, 1001, "job 1 belongs to u1000: u1001 may not see it"),
            Cancel(1, 1001, false),
            Start(1),
            Start(2),
            // An admin by configuration may cancel anyone's job.
            Cancel(2, 999, true),
            Signalled(2, 4, GRACE_MS),
            KilledAll(2, 15),
            Reason(2, "cancelled by u999"),
            ExitAll(1, 0),
        ],
    );
}

#[test]
fn only_admins_drain_and_nobody_runs_jobs_as_root_unless_allowed() {
    run(
        world(1),
        &[
            RegisterAll,
            DrainAs((0, 0), 1000, false),
            DrainAs((0, 0), 999, true),
            DrainAs((0, 0), 0, true),
            RefusedAs("1x1", 0, "jobs may not run as root"),
        ],
    );
    let mut cfg = config(4, 4, 1);
    cfg.auth.allow_root_jobs = true;
    run(
        World::new(cfg),
        &[RegisterAll, SubmitAs("1x1", 0), Start(1), ExitAll(1, 0)],
    );
}

#[test]
fn requests_over_the_limits_are_refused_with_the_key_to_raise() {
    let mut cfg = config(4, 4, 1);
    cfg.limits.max_queued_per_user = 2;
    cfg.limits.max_job_nodes = 8;
    cfg.limits.max_argv_bytes = 64;
    cfg.limits.max_env_bytes = 64;
    let w = run(
        World::new(cfg),
        &[
            RegisterAll,
            Submit("2x4"),
            Submit("2x4"),
            Start(1),
            Start(2),
            Submit("2x4"),
            Submit("2x4"),
            RefusedAs(
                "2x4",
                1000,
                "u1000 already has 2 jobs queued; the limit is 2 (max_queued_per_user)",
            ),
            // Another user's queue is their own.
            SubmitAs("2x4", 1001),
            RefusedAs(
                "4x4",
                1001,
                "job asks 4x4 (16 nodes); the limit is 8 nodes per job (max_job_nodes)",
            ),
        ],
    );
    let mut big = crate::state::testkit::new_job("1x1", 1000, 0);
    big.argv = vec!["x".repeat(100)];
    let mut w = w;
    let e = w
        .step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, big.clone()))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the command line is 101 bytes; the limit is 64 (max_argv_bytes in the master's config)"
    );
    big.argv = vec!["true".into()];
    big.env = [("K".to_string(), "v".repeat(80))].into();
    let e = w
        .step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, big.clone()))
        .unwrap_err();
    assert!(e.to_string().contains("max_env_bytes"), "{e}");
    big.env = [("A=B".to_string(), "v".to_string())].into();
    let e = w
        .step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, big.clone()))
        .unwrap_err();
    assert!(e.to_string().contains("may not contain '='"), "{e}");
}

/// What a user's queued jobs hold is bounded: an array of a large command and
/// environment counts once (its tasks share it), single jobs each; a task given a spec of
/// its own by an update counts again, and is refused past the limit; jobs that start give
/// their share back; a restart counts the same.
#[test]
fn queued_bytes_are_bounded_per_user_an_array_counting_once() {
    use crate::state::events::JobUpdate;
    use crate::state::reactor::{on_submit, on_update};
    use crate::state::testkit::{caller, new_job};
    let mut cfg = config(2, 2, 1);
    cfg.limits.max_queued_bytes_per_user = 4 << 20;
    let mut w = run(World::new(cfg), &[RegisterAll]);
    let big = |held: bool| {
        let mut j = new_job("2x2", 1000, 0);
        j.argv = vec!["./solver".into(), "a".repeat((256 << 10) - 20)];
        j.env.insert("BIG".into(), "e".repeat((1 << 20) - 20));
        j.at_submit.hold = held;
        j
    };
    // 1,001 tasks of 1.25 MiB each: one copy.
    let mut array = big(true);
    array.at_submit.array = Some(gang_core::array::parse("0-1000", 2000).unwrap());
    w.step(|st, fx, now| on_submit(st, fx, now, array)).unwrap();
    let one = w.st.queued.of(1000).1;
    assert!(one > 5 << 18 && one < 3 << 19, "{one}");
    assert_eq!(w.st.queued.of(1000).0, 1001);
    // Two single jobs of the same size fit; the third passes 4 MiB.
    for _ in 0..2 {
        w.step(|st, fx, now| on_submit(st, fx, now, big(true)))
            .unwrap();
    }
    let e = w
        .step(|st, fx, now| on_submit(st, fx, now, big(true)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("u1000's queued jobs already hold") && e.contains("(max_queued_bytes_per_user)"),
        "{e}"
    );
    // Renaming one task alone would copy the array's spec for it: refused, saying why.
    let rename = JobUpdate {
        job: gang_core::JobId(7),
        hold: None,
        time_limit_s: None,
        name: Some("mine".into()),
        end_with: None,
    };
    let e = w
        .step(|st, fx, now| on_update(st, fx, now, &caller(1000), rename.clone()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shares its array's command and environment"),
        "{e}"
    );
    // Another user's share is their own.
    let mut other = big(true);
    other.owner = caller(1001).owner;
    w.step(|st, fx, now| on_submit(st, fx, now, other)).unwrap();
    // One single job ends: its share is free again, and the rename fits now.
    w.step(|st, fx, now| {
        crate::state::reactor::on_cancel(st, fx, now, gang_core::JobId(1002), &caller(1000))
    })
    .unwrap();
    w.step(|st, fx, now| on_update(st, fx, now, &caller(1000), rename))
        .unwrap();
    assert!(!std::sync::Arc::ptr_eq(
        &w.view(7).record.spec,
        &w.view(8).record.spec
    ));
    let before = w.st.queued.of(1000);
    let w = w.restart();
    assert_eq!(
        w.st.queued.of(1000),
        before,
        "counted the same after a restart"
    );
}

/// A listing comes in pages that stay within a message's limit however large the jobs:
/// ten jobs of 256 KiB command lines are four pages (three a page), each going on where
/// the last stopped, newest first.
#[test]
fn listings_come_in_pages_of_about_a_mebibyte() {
    use crate::service::convert::{LIST_PAGE_BYTES, list_filter, list_page};
    use crate::state::testkit::{caller, new_job};
    let mut w = run(World::new(config(2, 2, 1)), &[RegisterAll]);
    for _ in 0..10 {
        let mut j = new_job("2x2", 1000, 0);
        j.argv = vec!["./a".into(), "z".repeat((256 << 10) - 10)];
        j.at_submit.hold = true;
        w.step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, j))
            .unwrap();
    }
    let mut before = 0;
    let mut seen = vec![];
    let mut pages = 0;
    loop {
        let req = gang_proto::v1::ListJobsRequest {
            states: vec![],
            limit: 0,
            before_id: before,
        };
        let filter = list_filter(req).unwrap();
        let listed = w.st.list_for(&caller(1000), &filter, w.now);
        let page = list_page(&listed.views, listed.more);
        assert!(prost::Message::encoded_len(&page) <= LIST_PAGE_BYTES);
        seen.extend(page.jobs.iter().map(|j| j.id));
        pages += 1;
        if page.next_before_id == 0 {
            break;
        }
        before = page.next_before_id;
    }
    assert_eq!(seen, (1..=10).rev().collect::<Vec<u64>>());
    assert_eq!(pages, 4);
}

#[test]
fn a_retried_submission_returns_the_first_job_even_after_a_restart() {
    let mut w = run(world(1), &[RegisterAll]);
    let mut job = crate::state::testkit::new_job("4x4", 1000, 0);
    job.client_token = Some("tok-1".into());
    let submit = |w: &mut World, j: &crate::state::events::NewJob| {
        let j = j.clone();
        w.step(|st, fx, now| crate::state::reactor::on_submit(st, fx, now, j))
            .unwrap()
            .id
            .0
    };
    assert_eq!(submit(&mut w, &job), 1);
    assert_eq!(submit(&mut w, &job), 1, "the same job, not a second");
    let mut w = w.restart();
    assert_eq!(submit(&mut w, &job), 1, "the token survives a restart");
    // Another user's token is theirs; another token is another job.
    let mut other = job.clone();
    other.owner = crate::state::testkit::caller(1001).owner;
    assert_eq!(submit(&mut w, &other), 2);
    job.client_token = Some("tok-2".into());
    assert_eq!(submit(&mut w, &job), 3);
    run(w, &[Queue(&[2, 3])]);
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
