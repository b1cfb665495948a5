//! Jobs read back from the store: an array task gets its array's shared spec again, and a
//! row that must not run (its spec missing, or refused by the store's checks) is failed,
//! saying why.

use std::sync::Arc;

use super::{SavedJob, Spec, State};

/// Put the array's spec into a task row read back (`specs`: the arrays' specs saved). A
/// spec that is missing (a store damaged by hand) leaves the task failed, saying so, rather
/// than run with the placeholder.
pub fn attach_spec(saved: &mut SavedJob, specs: &std::collections::HashMap<u64, Arc<Spec>>) {
    let Some(array) = saved.spec_of else {
        return;
    };
    match specs.get(&array.0) {
        Some(spec) => saved.record.spec = spec.clone(),
        None if saved.record.state.is_final() => {}
        None => fail_read_back(
            saved,
            format!(
                "the spec of array {array} is missing from the master's store: this task cannot run"
            ),
        ),
    }
}

/// A job read back that must not run (not ended, its row broken or refused): failed, saying
/// why, with nothing of its live state kept.
pub fn fail_read_back(saved: &mut SavedJob, why: String) {
    saved
        .record
        .move_to(State::Failed)
        .expect("a job not ended may always fail");
    saved.record.reason = why;
    saved.live = None;
}
