//! Allocations and their steps: placed once, steps started inside without the queue,
//! waiting for one another's nodes, switched in the allocation's slots, ended with it.

use gang_core::JobId;

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::events::NewJob;
use crate::state::reactor;
use crate::state::testkit::{GRACE_MS, World, config, new_job};

fn world() -> World {
    World::new(config(4, 4, 2))
}

/// `gangctl alloc`: an allocation without a batch script.
fn held(j: &mut NewJob) {
    j.allocate = true;
    j.argv.clear();
    j.name = "alloc".into();
}

/// `gangctl submit job.sh`: the script is the allocation's one rank.
fn batch(j: &mut NewJob) {
    j.allocate = true;
    j.argv = vec![
        "/bin/sh".into(),
        "-c".into(),
        "prun ./a".into(),
        "job.sh".into(),
    ];
}

fn step_of_1(j: &mut NewJob) {
    j.allocation = Some(JobId(1));
}

#[test]
fn steps_start_at_once_inside_the_allocation_and_wait_for_each_others_nodes() {
    run(
        world(),
        &[
            RegisterAll,
            SubmitWith("2x2", held),
            // Nothing to launch: running once placed.
            State(1, Running),
            Launching(1, 0),
            // A step fills part of it at once (no queue), a second the rest, a third waits.
            SubmitWith("1x2", step_of_1),
            State(2, Starting),
            On(2, "1x2@(0,0)"),
            Launching(2, 2),
            Start(2),
            SubmitWith("2", step_of_1),
            On(3, "1x2@(1,0)"),
            Start(3),
            SubmitWith("4", step_of_1),
            State(4, Queued),
            Pending(
                4,
                "allocation 1's nodes are busy with steps 2 on 1x2@(0,0), 3 on 1x2@(1,0)",
            ),
            Queue(&[]),
            // A step runs in its allocation's slices.
            Slices(2, &[0]),
            ExitAll(2, 0),
            State(2, Completed),
            State(4, Queued),
            ExitAll(3, 0),
            State(4, Starting),
            On(4, "2x2@(0,0)"),
            Start(4),
            // The allocation's command exits: its running step is stopped, and it ends once
            // the step has.
            EndAlloc(1, 0, ""),
            Signalled(4, 4, GRACE_MS),
            State(1, Running),
            KilledAll(4, 15),
            State(4, Cancelled),
            Reason(4, "allocation 1 ended"),
            State(1, Completed),
            Code(1, Some(0)),
            EndAlloc(1, 0, "job 1 already completed"),
        ],
    );
}

#[test]
fn a_batch_script_is_one_rank_on_the_first_node_and_its_exit_ends_the_allocation() {
    let w = run(
        world(),
        &[
            RegisterAll,
            Submit("4x4"),
            Start(1),
            SubmitWith("2x2", batch),
            // One rank: the script, on the allocation's first node.
            Launching(2, 1),
            Start(2),
            State(2, Running),
            SubmitWith("2x2", |j| j.allocation = Some(JobId(2))),
            SubmitWith("1x1", |j| j.allocation = Some(JobId(2))),
            Start(3),
            State(3, Running),
            Pending(4, "allocation 2's nodes are busy with step 3 on 2x2@(0,0)"),
            // The script fails: the running step is stopped, the waiting one never runs.
            Exit(2, 0, 3),
            Signalled(3, 4, GRACE_MS),
            State(4, Cancelled),
            Reason(4, "allocation 2 ended"),
            State(2, Running),
            KilledAll(3, 15),
            State(2, Failed),
            Code(2, Some(3)),
            EndAlloc(
                2,
                0,
                "job 2 is not an allocation without a batch script: it ends with its script; `gangctl cancel 2` stops it",
            ),
        ],
    );
    let v = w.view(2);
    assert_eq!(v.step_ids, vec![JobId(3), JobId(4)]);
    assert_eq!(w.view(4).step, Some(1));
}

#[test]
fn cancelling_an_allocation_or_its_time_limit_ends_its_steps_too() {
    run(
        world(),
        &[
            RegisterAll,
            SubmitWith("2x2", held),
            SubmitWith("2x2", step_of_1),
            Start(2),
            Cancel(1, 1000, true),
            Signalled(2, 4, GRACE_MS),
            KilledAll(2, 15),
            State(2, Cancelled),
            State(1, Cancelled),
            Reason(1, "cancelled by u1000"),
        ],
    );
    run(
        world(),
        &[
            RegisterAll,
            SubmitWith("2x2", |j| {
                held(j);
                j.time_limit_s = 1;
            }),
            SubmitWith("2x2", step_of_1),
            Start(2),
            Wait(1500),
            Signalled(2, 4, GRACE_MS),
            KilledAll(2, 15),
            State(1, Timeout),
            Code(1, Some(124)),
        ],
    );
}

#[test]
fn a_step_is_refused_where_it_cannot_run_naming_why() {
    let mut w = run(
        world(),
        &[
            RegisterAll,
            SubmitWith("2x2", held),
            Submit("1x1"),
            Start(2),
        ],
    );
    let mut refused = |uid: u32, f: &dyn Fn(&mut NewJob)| {
        let mut j = new_job("1x1", uid, 0);
        f(&mut j);
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, j))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refused(1000, &|j| {
            j.allocation = Some(JobId(1));
            j.shape = "4x4".into();
        }),
        "step asks 4x4 but allocation 1 is 2x2"
    );
    let five = refused(1000, &|j| {
        j.allocation = Some(JobId(1));
        j.shape = "5".into();
    });
    assert!(five.contains("2x2"), "{five}");
    assert_eq!(
        refused(1001, &|j| j.allocation = Some(JobId(1))),
        "job 1 belongs to u1000: u1001 may not start a step in it"
    );
    assert!(
        refused(1000, &|j| j.allocation = Some(JobId(2))).starts_with("job 2 is not an allocation"),
    );
    assert_eq!(
        refused(1000, &|j| j.allocation = Some(JobId(9))),
        "spec.allocation: there is no allocation 9"
    );
    assert_eq!(
        refused(1000, &|j| {
            j.allocation = Some(JobId(1));
            j.at_submit.hold = true;
        }),
        "a step of allocation 1 cannot wait on dependencies or a hold: it starts in the allocation at once"
    );
}

#[test]
fn a_master_restart_keeps_running_and_waiting_steps() {
    run(
        world(),
        &[
            RegisterAll,
            SubmitWith("2x2", held),
            SubmitWith("2x2", step_of_1),
            Start(2),
            SubmitWith("1x1", step_of_1),
            State(3, Queued),
            Restart,
            RegisterAll,
            State(1, Running),
            State(2, Running),
            State(3, Queued),
            ExitAll(2, 0),
            State(2, Completed),
            State(3, Starting),
            Start(3),
            ExitAll(3, 0),
            EndAlloc(1, 7, ""),
            State(1, Failed),
            Reason(1, "the allocation's command exited with code 7"),
        ],
    );
}
