//! Exits gathered up a job's tree (issue "10,000 nodes, finished"), the pure part: what a
//! node holds of its subtree's exits and when it sends them on, with time an argument.
//!
//! The tree is the job's fence tree (`gang_core::tree::fanout::links` over the ranks, rank
//! r on the r-th node of the part). A node's subtree is a range of ranks; it sends ONE
//! batch up once every rank of it is accounted for: a clean exit held here (its own, or
//! in a child's batch), or a rank whose exit went to the master directly (a failure, sent
//! at once; the batch names it in `direct` so that the nodes above can count it). A
//! subtree that is not complete after the linger goes up as it is (a partial batch), so
//! that nothing waits forever behind a dead node or a rank still running; what comes
//! later goes up in another batch. The root sends to the master.
//!
//! The linger: `LINGER_BASE` plus `LINGER_STEP` per level of the node's subtree below it,
//! at most `LINGER_MAX`. A node's linger is longer than any child's, so a child that sends
//! a partial batch after its own linger still finds its parent waiting (when the two
//! started holding at about the same time, as ranks of one job that ends together do).
//! One second at the leaves: longer than the spread of a job's ranks ending together on
//! a loaded host, short enough that a rank running on after its siblings delays the
//! master's news of them by seconds, not minutes. The linger costs time only when a
//! subtree is incomplete: a complete one goes up at once.

use std::collections::BTreeSet;
use std::ops::Range;
use std::time::{Duration, Instant};

use gang_core::Submesh;
use gang_core::tree::fanout;
use gang_proto::v1::{RankExit, rank_exit::How};

use crate::error::Coord;

pub const LINGER_BASE: Duration = Duration::from_secs(1);
pub const LINGER_STEP: Duration = Duration::from_millis(500);
pub const LINGER_MAX: Duration = Duration::from_secs(5);

/// A rank's place in its job's tree, for gathering exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub rank: u32,
    pub part: Submesh,
    /// The parent's rank and where its agent listens (None: the root).
    pub parent: Option<(u32, String)>,
    /// Each child's rank and the ranks of its subtree.
    pub children: Vec<(u32, Range<u32>)>,
    /// How many ranks this subtree holds (this one included).
    pub size: u32,
    /// How long a partial subtree is held here.
    pub linger: Duration,
    /// Hops from here to the root: how many nodes may hold a batch above this one.
    pub hops: u32,
}

/// The ranks of the subtree headed by `r` in the tree of `n` ranks, `width` wide, and
/// its hops to the root (`fanout::links`'s walk, keeping the ranges).
fn subtree(n: usize, width: usize, r: usize) -> (Range<usize>, u32) {
    if r == 0 {
        return (0..n, 0);
    }
    let top = fanout::split(0..n, width);
    let mut range = top.iter().find(|t| t.contains(&r)).expect("covers").clone();
    let mut hops = u32::from(range.start != 0);
    while range.start != r {
        range = fanout::children(range, width)
            .into_iter()
            .find(|c| c.contains(&r))
            .expect("children cover the rest of a range");
        hops += 1;
    }
    (range, hops)
}

impl Place {
    /// Rank `rank` of a job of `part` (ranks row-major), its tree `width` wide.
    pub fn new(rank: u32, part: Submesh, width: u32, parent_address: String) -> Place {
        let n = (part.w * part.h) as usize;
        let w = width as usize;
        let links = fanout::links(n, w, rank as usize);
        let (range, hops) = subtree(n, w, rank as usize);
        let children = links
            .children
            .iter()
            .map(|&c| {
                let (r, _) = subtree(n, w, c);
                (c as u32, r.start as u32..r.end as u32)
            })
            .collect();
        let levels = fanout::depth(range.len(), w).saturating_sub(1);
        let linger = (LINGER_BASE + LINGER_STEP * levels).min(LINGER_MAX);
        Place {
            rank,
            part,
            parent: links.parent.map(|p| (p as u32, parent_address)),
            children,
            size: range.len() as u32,
            linger,
            hops,
        }
    }

    /// The node rank `r` of the job runs on.
    pub fn node_of(&self, r: u32) -> Coord {
        Coord {
            x: self.part.x + r % self.part.w,
            y: self.part.y + r / self.part.w,
        }
    }

    /// How long batches handed up from here may be held above (each node up to its
    /// linger, none longer than `LINGER_MAX`).
    pub fn held_above(&self) -> Duration {
        LINGER_MAX * self.hops
    }
}

/// Whether an exit is news the master should have at once (a failure of the job), and
/// so goes to it directly, not up the tree. `signalled`: the master had this node signal
/// the job (a cancel, a time limit): a rank ending by a signal then is what the master
/// asked for, no news, and is gathered as a clean exit is (a cancelled 4,096-rank job
/// would otherwise be 4,096 calls on the master).
pub fn urgent(exit: &RankExit, signalled: bool) -> bool {
    let asked_for = signalled && matches!(exit.how, Some(How::Signal(_)));
    exit.abort.is_some() || !(matches!(exit.how, Some(How::Code(0))) || asked_for)
}

/// What to send, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub exits: Vec<RankExit>,
    pub direct: Vec<u32>,
    /// The parent's rank and address; None: the master.
    pub to: Option<(u32, String)>,
}

/// One job's exits at this node.
#[derive(Debug)]
pub struct Gather {
    pub place: Place,
    /// Ranks of the subtree accounted for: held, sent, or reported directly.
    accounted: BTreeSet<u32>,
    held: Vec<RankExit>,
    direct: Vec<u32>,
    /// When the oldest thing held now came.
    since: Option<Instant>,
    /// The master had this node signal the job (`urgent`).
    pub signalled: bool,
}

impl Gather {
    pub fn new(place: Place) -> Gather {
        Gather {
            place,
            accounted: BTreeSet::new(),
            held: Vec::new(),
            direct: Vec::new(),
            since: None,
            signalled: false,
        }
    }

    fn note(&mut self, now: Instant) {
        self.since.get_or_insert(now);
    }

    /// This node's own rank's clean exit, to go up.
    pub fn own(&mut self, exit: RankExit, now: Instant) {
        if self.accounted.insert(self.place.rank) {
            self.held.push(exit);
            self.note(now);
        }
    }

    /// This node's own rank's exit went to the master directly.
    pub fn own_direct(&mut self, now: Instant) {
        if self.accounted.insert(self.place.rank) {
            self.direct.push(self.place.rank);
            self.note(now);
        }
    }

    /// A child's batch, from the node `from` (the caller's certificate). Refused unless
    /// `child` is a child of this rank running on `from`, and every rank the batch names
    /// is of its subtree, each exit of this job on its rank's node. A rank already
    /// accounted for (a batch sent again after a lost answer) is skipped.
    pub fn child(
        &mut self,
        child: u32,
        from: Coord,
        (job, exits, direct): (u64, Vec<RankExit>, Vec<u32>),
        now: Instant,
    ) -> Result<(), String> {
        let Some((_, range)) = self.place.children.iter().find(|(c, _)| *c == child) else {
            return Err(format!(
                "rank {child} of job {job} is not a child of rank {} in its tree",
                self.place.rank
            ));
        };
        if self.place.node_of(child) != from {
            return Err(format!(
                "rank {child} of job {job} does not run on node {from}"
            ));
        }
        let range = range.clone();
        if let Some(r) = direct.iter().find(|r| !range.contains(r)) {
            return Err(format!("rank {r} is not in the subtree of rank {child}"));
        }
        if let Some(e) = exits.iter().find(|e| {
            e.job_id != job || !range.contains(&e.rank) || self.place.node_of(e.rank) != e_node(e)
        }) {
            return Err(format!(
                "an exit of rank {} of job {} at node ({},{}) is not of the subtree of rank {child}",
                e.rank, e.job_id, e.x, e.y
            ));
        }
        for e in exits {
            if self.accounted.insert(e.rank) {
                self.held.push(e);
                self.note(now);
            }
        }
        for r in direct {
            if self.accounted.insert(r) {
                self.direct.push(r);
                self.note(now);
            }
        }
        Ok(())
    }

    /// Every rank of the subtree is accounted for and nothing is held: the job is done here.
    pub fn finished(&self) -> bool {
        self.accounted.len() == self.place.size as usize && self.since.is_none()
    }

    /// When to look again (None: nothing held).
    pub fn deadline(&self) -> Option<Instant> {
        self.since.map(|s| s + self.place.linger)
    }

    /// What to send now, if anything: everything held, once the subtree is complete or
    /// the linger ran out.
    pub fn due(&mut self, now: Instant) -> Option<Batch> {
        let since = self.since?;
        let complete = self.accounted.len() == self.place.size as usize;
        if !complete && now < since + self.place.linger {
            return None;
        }
        self.since = None;
        Some(Batch {
            exits: std::mem::take(&mut self.held),
            direct: std::mem::take(&mut self.direct),
            to: self.place.parent.clone(),
        })
    }
}

fn e_node(e: &RankExit) -> Coord {
    Coord { x: e.x, y: e.y }
}

#[cfg(test)]
#[path = "exit_gather_tests.rs"]
mod tests;
