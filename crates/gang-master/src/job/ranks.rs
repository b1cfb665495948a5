//! The live state of a job's ranks, shared until changed.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// One rank's lifecycle as far as the master knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    /// Launch requested, no answer yet (or, after a master restart, not yet re-reported).
    Pending,
    Running,
    /// Exited with this wait status translated to a shell exit code (128+signal).
    Exited(i32),
    /// Never started, or lost with its node.
    Gone,
}

impl Rank {
    pub fn is_done(self) -> bool {
        matches!(self, Rank::Exited(_) | Rank::Gone)
    }
}

/// A job's ranks, copied only when changed while shared. A round's undo journal keeps a
/// copy of every job the round changes (`JobTable::get_mut`): with the ranks inline, a
/// round that only accounted a 10,000-rank job's run time (every tick, 100 ms) copied its
/// 10,000 ranks too, 3 % of the master's CPU during 10,000-node launches. Now the journal
/// shares them, and the first change to a rank in a round copies them once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranks(Arc<Vec<Rank>>);

impl Deref for Ranks {
    type Target = Vec<Rank>;

    fn deref(&self) -> &Vec<Rank> {
        &self.0
    }
}

impl DerefMut for Ranks {
    fn deref_mut(&mut self) -> &mut Vec<Rank> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<Rank>> for Ranks {
    fn from(ranks: Vec<Rank>) -> Self {
        Ranks(Arc::new(ranks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_the_ranks_until_one_side_changes_them() {
        let mut a = Ranks::from(vec![Rank::Pending; 3]);
        let kept = a.clone();
        assert!(Arc::ptr_eq(&a.0, &kept.0), "a clone copies nothing");
        a[1] = Rank::Running;
        assert_eq!(*kept, vec![Rank::Pending; 3], "the copy kept is unchanged");
        assert_eq!(a[1], Rank::Running);
        assert!(!Arc::ptr_eq(&a.0, &kept.0));
    }
}
