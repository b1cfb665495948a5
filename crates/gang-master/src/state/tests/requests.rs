//! Requests and who may make them: refusals that change nothing, users' and admins' reach,
//! the limits and their keys, queued bytes, pages of listings, retried submissions.

use super::S::*;
use super::run;
use crate::state::testkit::{GRACE_MS, World, config};

fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
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
    array.at_submit.array = Some(gang_core::schedule::array::parse("0-1000", 2000).unwrap());
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
