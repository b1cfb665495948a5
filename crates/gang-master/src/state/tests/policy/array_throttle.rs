//! Arrays: one job per task, kept to their limit of tasks at once.

use gang_core::JobId;

use super::world;
use crate::job::State::*;
use crate::state::tests::S::*;
use crate::state::tests::run;

#[test]
fn arrays_make_one_job_per_task_and_keep_to_their_limit() {
    let mut w = run(
        world(1),
        &[
            RegisterAll,
            SubmitWith("1x1", |j| {
                j.at_submit.array = Some(gang_core::schedule::array::parse("1-5%2", 100).unwrap());
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
    assert_eq!(w.view(1).array_indices, [1, 2, 3, 4, 5]);
    assert!(
        w.view(2).array_indices.is_empty(),
        "the array's own id lists them"
    );
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
