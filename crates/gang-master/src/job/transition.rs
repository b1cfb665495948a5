//! A job's state changes here and only here, through [`JobRecord::move_to`], against one
//! table of the transitions a job makes. Any other is a bug of the reactor: it is refused
//! as an error (the round that asked is taken back, `state::round`), never written.
//!
//! ```text
//!   Queued ──> Starting ──> Running ──> Completed | Failed | Cancelled | Timeout
//!     │          │  ^                      (final: no way out)
//!     │          └──┴── Queued again (its launch reached no agent before a restart)
//!     └──> Failed | Cancelled (never placed: refused by the core, a dependency that
//!          can never hold, a cancel)
//! ```
//! A job that is Starting may end at once (a rank that could not start, a cancel, its
//! time limit), before every rank reported running.

use gang_core::JobId;

use super::{JobRecord, State};

/// A change of state the table does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("job {job} cannot go from {from:?} to {to:?} (not a transition a job makes)")]
pub struct BadTransition {
    pub job: JobId,
    pub from: State,
    pub to: State,
}

/// Whether a job in `from` may go to `to`.
pub fn allowed(from: State, to: State) -> bool {
    use State::*;
    match from {
        Queued => matches!(to, Starting | Failed | Cancelled),
        Starting => matches!(
            to,
            Running | Queued | Completed | Failed | Cancelled | Timeout
        ),
        Running => matches!(to, Completed | Failed | Cancelled | Timeout),
        Completed | Failed | Cancelled | Timeout => false,
    }
}

impl JobRecord {
    pub fn state(&self) -> State {
        self.state
    }

    /// Move the job to `to`, if the table allows it; otherwise nothing changes.
    pub fn move_to(&mut self, to: State) -> Result<(), BadTransition> {
        if !allowed(self.state, to) {
            return Err(BadTransition {
                job: self.id,
                from: self.state,
                to,
            });
        }
        self.state = to;
        Ok(())
    }

    /// A record in any state, for tests that start from one.
    #[cfg(test)]
    pub fn in_state(mut self, state: State) -> JobRecord {
        self.state = state;
        self
    }

    /// Put a record in any state, for tests that start from one.
    #[cfg(test)]
    pub fn force_state(&mut self, state: State) {
        self.state = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::*;

    const ALL: [State; 7] = [
        Queued, Starting, Running, Completed, Failed, Cancelled, Timeout,
    ];

    #[test]
    fn final_states_have_no_way_out_and_nothing_stays_where_it_is() {
        for from in ALL {
            for to in ALL {
                if from.is_final() || from == to {
                    assert!(!allowed(from, to), "{from:?} -> {to:?}");
                }
            }
        }
    }

    #[test]
    fn only_a_placed_job_runs_and_only_a_started_one_times_out() {
        for from in ALL {
            assert_eq!(allowed(from, Running), from == Starting, "{from:?}");
            assert_eq!(allowed(from, Starting), from == Queued, "{from:?}");
            assert_eq!(
                allowed(from, Timeout),
                matches!(from, Starting | Running),
                "{from:?}"
            );
            assert_eq!(allowed(from, Queued), from == Starting, "{from:?}");
        }
    }

    #[test]
    fn a_refused_move_changes_nothing_and_names_both_ends() {
        let mut r = crate::state::testkit::record(7).in_state(Completed);
        let e = r.move_to(Running).unwrap_err();
        assert_eq!(r.state(), Completed);
        assert_eq!(
            e.to_string(),
            "job 7 cannot go from Completed to Running (not a transition a job makes)"
        );
        let mut r = crate::state::testkit::record(8);
        assert_eq!(r.state(), Queued);
        r.move_to(Starting).unwrap();
        r.move_to(Running).unwrap();
        r.move_to(Timeout).unwrap();
        assert_eq!(r.state(), Timeout);
    }
}
