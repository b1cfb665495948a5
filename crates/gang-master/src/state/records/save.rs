//! A job's save: its record into the round's saves, its view announced, its owner's queued
//! count kept, and what waits on it told (`policy::dependency`).

use gang_core::JobId;

use crate::job::State;
use crate::state::effects::{Effect, Effects, Save};
use crate::state::{MasterState, Now};

impl MasterState {
    /// Persist a job and announce it (both take effect with the round), and count it in
    /// its owner's queued jobs while it is queued.
    pub(in crate::state) fn save(&mut self, fx: &mut Effects, now: Now, id: JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let queued = job.record.state() == State::Queued;
        if queued != job.charged {
            let (uid, spec) = (job.record.owner.uid, job.record.spec.clone());
            if queued {
                self.queued.charge(uid, &spec);
            } else {
                self.queued.uncharge(uid, &spec);
            }
            self.jobs.get_mut(id).expect("present").charged = queued;
        }
        self.job_changed(id);
        let job = self.jobs.get(id).expect("present");
        fx.emit(Effect::Save(Save::Job(Box::new(
            job.persisted(self.home_slice(id)),
        ))));
        fx.emit(Effect::JobChanged(Box::new(self.job_view(job, now))));
    }
}
