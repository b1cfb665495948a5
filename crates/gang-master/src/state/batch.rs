//! A batch, the one way the state changes: the daemon's batches of commands, its recovery
//! at startup, and every step of the reactor's tests run through [`run`], so what a test
//! proves of a batch holds for the daemon's.

use crate::state::effects::{Effect, Effects, Save};
use crate::state::{MasterState, Now, reactor};

/// What a batch's saves go into: SQLite in the daemon, the recorder's database in tests.
pub trait Commit {
    /// Make every save durable, or (`Err(why)`) none of them.
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String>;
}

/// Run `events` as one batch at `now`: from a checkpoint of the state, then the end of the
/// batch (a new slice table if the matrix changed), then the commit of its saves. Saved:
/// the state is kept and checked, and the effects are handed out to be carried out. Not
/// saved: the state returns to the checkpoint, and nothing of the batch leaves.
///
/// `events`' own result is returned either way: the caller answers from it, with an error
/// if the batch was not saved.
pub fn run<R>(
    st: &mut MasterState,
    db: &mut impl Commit,
    now: Now,
    events: impl FnOnce(&mut MasterState, &mut Effects, Now) -> R,
) -> (R, Result<Vec<Effect>, String>) {
    let cp = st.checkpoint();
    let mut fx = Effects::default();
    let r = events(st, &mut fx, now);
    reactor::end_batch(st, &mut fx, now);
    // A batch that saves nothing (heartbeats: most of an idle cluster's batches) opens no
    // transaction: with thousands of nodes, that is tens of write locks and commits a
    // second for nothing.
    let nothing_to_save = fx.saves().next().is_none();
    if !nothing_to_save && let Err(why) = db.commit(fx.saves()) {
        st.rollback(cp);
        return (r, Err(why));
    }
    st.settle(cp);
    // Every batch of the tests; the daemon's in debug builds (the check reads every job).
    if cfg!(any(test, debug_assertions))
        && let Err(e) = st.sanity_check()
    {
        // A broken invariant is a bug: fail loudly (the master exits, systemd restarts it,
        // and recovery rebuilds the state from what was saved).
        panic!("master state inconsistent after a batch: {e}");
    }
    (r, Ok(fx.into_vec()))
}
