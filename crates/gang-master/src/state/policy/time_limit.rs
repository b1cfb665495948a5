//! Time limits (`--time`, Slurm's TIMEOUT): a placed job whose run time (the time its
//! rows were scheduled, not time spent stopped in other slices) passes its limit is
//! cancelled as timed out; a user may lower a limit, only an admin may raise it.

use gang_core::JobId;

use crate::error::{MasterError, Result};
use crate::job::Job;
use crate::state::effects::{Effect, Effects, Save};
use crate::state::events::Caller;
use crate::state::{MasterState, Now};

/// How often accumulated run times are written (a crash loses at most this much of them).
const RUN_SAVE_EVERY_NS: i64 = 5_000_000_000;

/// Whether `caller` may give `job` the time limit `limit` (0: none).
pub(in crate::state) fn check_update(job: &Job, caller: &Caller, limit: Option<u64>) -> Result<()> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let id = job.id();
    let cur = job.record.time_limit_s;
    let raises = cur != 0 && (limit == 0 || limit > cur);
    if raises && !caller.admin {
        return Err(MasterError::Forbidden(format!(
            "job {id} has a time limit of {cur} s; a user may lower it, only an admin \
             may raise it (asked {})",
            if limit == 0 {
                "none".to_string()
            } else {
                format!("{limit} s")
            }
        )));
    }
    Ok(())
}

impl MasterState {
    /// Run time accounting, time limits, and the periodic save of run times.
    pub(in crate::state) fn run_time_tick(&mut self, fx: &mut Effects, now: Now) {
        self.account_run_time(now);
        let limited: Vec<(JobId, u64)> = self
            .jobs
            .live()
            .filter(|j| j.record.state().is_placed() && j.cancelled.is_none())
            .filter(|j| {
                // A limit beyond i64 nanoseconds (292 years) is never reached.
                let limit_ns = i64::try_from(j.record.time_limit_s)
                    .ok()
                    .and_then(|s| s.checked_mul(1_000_000_000));
                j.record.time_limit_s > 0 && limit_ns.is_some_and(|l| j.record.run_ns > l)
            })
            .map(|j| (j.id(), j.record.time_limit_s))
            .collect();
        if now.mono_ns - self.run_saved_ns > RUN_SAVE_EVERY_NS {
            self.run_saved_ns = now.mono_ns;
            for j in self.jobs.live().filter(|j| j.record.state().is_placed()) {
                fx.emit(Effect::Save(Save::Job(Box::new(
                    j.persisted(self.home_slice(j.id())),
                ))));
            }
        }
        for (id, limit) in limited {
            let why = format!("time limit of {limit} s reached");
            // Before the cancel saves the job, so a restart still ends it as a timeout.
            if let Some(j) = self.jobs.get_mut(id) {
                j.timed_out = true;
            }
            let _ = self.cancel(fx, now, id, None, why);
        }
    }
}
