//! A round, the one way the state changes: the daemon's rounds of commands, its recovery
//! at startup, and every step of the reactor's tests run through [`run`], so what a test
//! proves of a round holds for the daemon's.

use crate::state::effects::{Effect, Effects, Save};
use crate::state::{MasterState, Now, reactor};

/// What a round's saves go into: SQLite in the daemon, the recorder's database in tests.
pub trait Commit {
    /// Make every save durable, or (`Err(why)`) none of them.
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String>;

    /// Whether this master may act now (`Err(why)` if not: a leader on etcd whose lease is
    /// not confirmed). A round that would change or send anything is then taken back.
    fn may_act(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Run `events` as one round at `now`: from a checkpoint of the state, then the end of the
/// round (a new slice table if the matrix changed), then the commit of its saves. Saved:
/// the state is kept and checked, and the effects are handed out to be carried out. Not
/// saved: the state returns to the checkpoint, and nothing of the round leaves.
///
/// `events`' own result is returned either way: the caller answers from it, with an error
/// if the round was not saved.
pub fn run<R>(
    st: &mut MasterState,
    db: &mut impl Commit,
    now: Now,
    events: impl FnOnce(&mut MasterState, &mut Effects, Now) -> R,
) -> (R, Result<Vec<Effect>, String>) {
    let cp = st.checkpoint();
    let mut fx = Effects::default();
    let r = events(st, &mut fx, now);
    reactor::end_round(st, &mut fx, now);
    // A transition the table refuses (`job::transition`) is a bug of the reactor: the
    // round is taken back whole rather than saved half right.
    if let Some(why) = fx.faulted() {
        let why = format!("the master refused its own change: {why}");
        st.rollback(cp);
        return (r, Err(why));
    }
    // A round that saves nothing (heartbeats: most of an idle cluster's rounds) opens no
    // transaction: with thousands of nodes, that is tens of write locks and commits a
    // second for nothing.
    let nothing_to_save = fx.saves().next().is_none();
    // Nothing to save or send (reads, heartbeats of an agent in step): answered even by a
    // master that may not act now.
    let acts = !nothing_to_save || fx.acts();
    if acts && let Err(why) = db.may_act() {
        st.rollback(cp);
        return (r, Err(why));
    }
    if !nothing_to_save && let Err(why) = db.commit(fx.saves()) {
        st.rollback(cp);
        return (r, Err(why));
    }
    st.settle(cp);
    // Every round of the tests; the daemon's in debug builds (the check reads every job).
    if cfg!(any(test, debug_assertions))
        && let Err(e) = st.sanity_check()
    {
        // A broken invariant is a bug: fail loudly (the master exits, systemd restarts it,
        // and recovery rebuilds the state from what was saved).
        panic!("master state inconsistent after a round: {e}");
    }
    (r, Ok(fx.into_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::State;
    use crate::state::testkit::{World, caller, config};
    use crate::state::tests::{S::*, run as steps};
    use gang_core::JobId;

    /// A store whose master may not act now (a leader on etcd whose lease is unconfirmed).
    struct NotActing;

    impl Commit for NotActing {
        fn commit<'a>(&mut self, _: impl Iterator<Item = &'a Save>) -> Result<(), String> {
            panic!("nothing is committed by a master that may not act")
        }

        fn may_act(&self) -> Result<(), String> {
            Err("lease unconfirmed".into())
        }
    }

    /// A master that may not act answers reads, and takes back every round that would save
    /// or send anything: nothing of it stays, nothing leaves.
    #[test]
    fn a_master_that_may_not_act_answers_reads_and_changes_nothing() {
        let mut w = steps(
            World::new(config(2, 2, 1)),
            &[
                RegisterAll,
                Submit("1x1"),
                Start(1),
                State(1, State::Running),
            ],
        );
        let admin = caller(0);
        let (r, saved) = run(&mut w.st, &mut NotActing, w.now, |st, fx, now| {
            reactor::on_cancel(st, fx, now, JobId(1), &admin)
        });
        assert!(r.is_ok(), "the reactor itself accepted the cancel");
        assert_eq!(saved.unwrap_err(), "lease unconfirmed");
        assert_eq!(w.view(1).state(), State::Running, "taken back");
        let (view, saved) = run(&mut w.st, &mut NotActing, w.now, |st, _, now| {
            st.view(JobId(1), now)
        });
        assert!(saved.is_ok(), "a read is answered");
        assert_eq!(view.unwrap().record.state(), State::Running);
        w.fx.assert_quiet();
    }

    /// A transition the table refuses takes the whole round back, with what was done
    /// before it in the round: nothing is saved or sent, and the caller hears why.
    #[test]
    fn a_refused_transition_takes_the_round_back() {
        let mut w = steps(
            World::new(config(2, 2, 1)),
            &[
                RegisterAll,
                Submit("2x2"),
                Start(1),
                Submit("2x2"),
                Submit("2x2"),
            ],
        );
        assert_eq!(
            w.view(2).state(),
            State::Queued,
            "one slice: only job 1 is placed"
        );
        let (_, saved) = run(&mut w.st, &mut w.fx, w.now, |st, fx, now| {
            reactor::on_cancel(st, fx, now, JobId(3), &caller(0)).unwrap();
            let job = st.jobs.get_mut(JobId(2)).unwrap();
            crate::state::transition(fx, &mut job.record, State::Running)
        });
        let why = saved.unwrap_err();
        assert!(
            why.contains("job 2 cannot go from Queued to Running"),
            "{why}"
        );
        assert_eq!(w.view(2).state(), State::Queued);
        assert_eq!(
            w.view(3).state(),
            State::Queued,
            "the cancel before it is taken back too"
        );
        w.fx.assert_quiet();
    }
}
