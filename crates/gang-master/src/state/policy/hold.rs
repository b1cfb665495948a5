//! Holds (`gangctl hold`, `--hold`, `release`): a held job stays out of the queue until
//! released; an admin's hold on another user's job is released by an admin only. Steps are
//! never held (their allocation is).

use crate::error::{MasterError, Result};
use crate::job::{Hold, Job, State};
use crate::state::effects::Effects;
use crate::state::events::Caller;
use crate::state::{MasterState, Now};

use super::gate::Gate;

/// A hold keeps a job out of the queue whatever else holds.
pub(in crate::state) fn gate(job: &Job) -> Option<Gate> {
    job.record.hold.clone().map(Gate::Held)
}

/// A step is never held or released: its allocation is.
pub(in crate::state) fn refuse_step(job: &Job, hold: Option<bool>) -> Result<()> {
    match job.record.allocation {
        Some(a) if hold.is_some() => Err(MasterError::Invalid(format!(
            "job {} is a step of allocation {a}: steps are not held (hold the allocation, \
             or cancel the step)",
            job.id()
        ))),
        _ => Ok(()),
    }
}

/// Whether `caller` may hold (`Some(true)`) or release (`Some(false)`) `job`: only a
/// queued job is held, only a held one released (an admin's hold by an admin).
pub(in crate::state) fn check_update(job: &Job, caller: &Caller, hold: Option<bool>) -> Result<()> {
    let id = job.id();
    let state = job.record.state();
    match hold {
        Some(true) if state != State::Queued => Err(MasterError::NotQueued {
            job: id,
            state: state.word(),
            action: "held",
        }),
        // Nothing to release: said, not done silently (scontrol release would be believed).
        Some(false) if job.record.hold.is_none() => Err(MasterError::Invalid(match state {
            State::Queued => format!("job {id} is queued and not held: nothing to release"),
            _ => format!(
                "job {id} is {} and was never held: nothing to release",
                state.word()
            ),
        })),
        Some(false) if job.record.hold.as_ref().is_some_and(|h| h.admin) && !caller.admin => {
            Err(MasterError::Forbidden(format!(
                "job {id} was held by an admin ({}); only an admin may release it",
                job.record
                    .hold
                    .as_ref()
                    .map(|h| h.by.as_str())
                    .unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

impl MasterState {
    /// Hold or release `id` (checked by [`check_update`]): a held job leaves the core's
    /// queue now; a released one is looked at again after this round (`admit_ready`), and
    /// queued if nothing else holds it.
    pub(in crate::state) fn apply_hold(
        &mut self,
        fx: &mut Effects,
        now: Now,
        caller: &Caller,
        id: gang_core::JobId,
        hold: Option<bool>,
    ) -> Result<()> {
        if hold == Some(true) && !self.gated.contains(&id) {
            let plan = self.sched_mut().finish(now.mono_s(), id)?;
            self.gated.insert(id);
            self.execute(fx, now, plan);
        }
        let job = self.jobs.get_mut(id).expect("present");
        match hold {
            Some(true) => {
                job.record.hold = Some(Hold {
                    by: caller.owner.user.clone(),
                    admin: caller.admin && caller.owner.uid != job.record.owner.uid,
                })
            }
            Some(false) => {
                job.record.hold = None;
                self.gates.dirty.insert(id);
            }
            None => {}
        }
        Ok(())
    }
}
