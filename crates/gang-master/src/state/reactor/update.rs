//! A job changed by its owner or an admin (`gangctl hold/release/update`, the end of an
//! allocation without a batch script): every check first, each policy's own (`hold`,
//! `time_limit`), then the change, saved in the round.

use std::sync::Arc;

use crate::error::{MasterError, Result};
use crate::state::effects::Effects;
use crate::state::events::{Caller, JobUpdate};
use crate::state::policy::{hold, time_limit};
use crate::state::records::queued::spec_bytes;
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

pub fn on_update(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    caller: &Caller,
    u: JobUpdate,
) -> Result<JobView> {
    let id = u.job;
    if let Some(code) = u.end_with {
        return st.end_allocation(fx, now, caller, id, code);
    }
    check(st, caller, &u)?;
    st.apply_hold(fx, now, caller, id, u.hold)?;
    if u.time_limit_s.is_some() || u.name.is_some() {
        respec(st, &u);
    }
    if let Some(limit) = u.time_limit_s {
        st.sched_mut()
            .set_estimate(id, (limit > 0).then_some(limit as f64));
    }
    st.save(fx, now, id);
    st.view(id, now)
}

/// Whether `caller` may make the whole of `u`: nothing changes unless all of it may.
fn check(st: &MasterState, caller: &Caller, u: &JobUpdate) -> Result<()> {
    let id = u.job;
    let job = st.jobs.get(id).ok_or(MasterError::UnknownJob(id))?;
    st.check_access(caller, job, "update")?;
    hold::refuse_step(job, u.hold)?;
    let state = job.record.state();
    if state.is_final() {
        return Err(MasterError::AlreadyEnded {
            job: id,
            state: state.word(),
        });
    }
    time_limit::check_update(job, caller, u.time_limit_s)?;
    if let Some(name) = &u.name {
        crate::job::check_name(name).map_err(MasterError::Invalid)?;
    }
    hold::check_update(job, caller, u.hold)?;
    // A task that shares its array's spec gets one of its own to change: its bytes count
    // again, within its owner's limit.
    if (u.time_limit_s.is_some() || u.name.is_some()) && job.spec_shared && job.charged {
        st.check_queue_room(&job.record.owner, 0, spec_bytes(&job.record.spec))
            .map_err(|e| {
                MasterError::Invalid(format!(
                    "job {id} shares its array's command and environment; changing it \
                     alone copies them: {e}"
                ))
            })?;
    }
    Ok(())
}

/// A new time limit or name: the job gets a spec of its own (a task stops sharing its
/// array's), and what its owner has queued is counted again.
fn respec(st: &mut MasterState, u: &JobUpdate) {
    let job = st.jobs.get_mut(u.job).expect("checked");
    job.spec_shared = false;
    let (uid, before) = (job.record.owner.uid, job.record.spec.clone());
    let charged = job.charged;
    let spec = Arc::make_mut(&mut job.record.spec);
    if let Some(limit) = u.time_limit_s {
        spec.time_limit_s = limit;
    }
    if let Some(name) = &u.name {
        spec.name = name.clone();
    }
    if charged && !Arc::ptr_eq(&before, &job.record.spec) {
        let after = job.record.spec.clone();
        st.queued.uncharge(uid, &before);
        st.queued.charge(uid, &after);
    }
}
