//! Liveness summarised up a tree: who sends its heartbeats to whom, and what a head holds
//! of its children's beats between two batches to the master.
//!
//! The master's nodes, in its fixed order (node index), are cut into blocks of `width + 1`;
//! the first registered node of a block heads it, the block's other registered nodes beat
//! their head, and the head sends the master one batch a period for the whole block. The
//! master then hears about `n / (width + 1)` messages a period instead of `n`. Blocks are
//! fixed, so a node that comes or goes moves no other block's head. One level only: a
//! head's batch goes to the master, so a dead head costs its children one beat's detour
//! (they fall back to the master), never a chain of fallbacks. Width 0 is flat: everyone
//! beats the master; so are `width` registered nodes or fewer (as the order tree is: the
//! master calls them itself).
//!
//! Pure and time-free: times are milliseconds on a clock the caller chooses.

use std::collections::BTreeMap;

/// Who heads whom among the registered nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Per node index: its head, for a node that beats one.
    parent: Vec<Option<usize>>,
    /// Per node index: where its children start in `members` and how many (heads only).
    children: Vec<(usize, usize)>,
    /// The registered nodes in order.
    members: Vec<usize>,
}

impl Assignment {
    /// The tree over `n` node indices of which those with `registered[i]` take part.
    pub fn new(registered: &[bool], width: usize) -> Self {
        let n = registered.len();
        let members: Vec<usize> = (0..n).filter(|&i| registered[i]).collect();
        let mut parent = vec![None; n];
        let mut children = vec![(0, 0); n];
        if width > 0 && members.len() > width {
            let mut start = 0;
            for first in (0..n).step_by(width + 1) {
                let last = (first + width).min(n - 1);
                let len = members[start..].iter().take_while(|&&m| m <= last).count();
                if let Some((&head, rest)) = members[start..start + len].split_first() {
                    children[head] = (start + 1, rest.len());
                    for &c in rest {
                        parent[c] = Some(head);
                    }
                }
                start += len;
            }
        }
        Assignment {
            parent,
            children,
            members,
        }
    }

    /// The head node `i` beats, None: it beats the master (a head, flat, or unknown).
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.parent.get(i).copied().flatten()
    }

    /// The nodes whose beats node `i` gathers (empty unless it heads a group).
    pub fn children(&self, i: usize) -> &[usize] {
        match self.children.get(i) {
            Some(&(start, len)) if len > 0 => &self.members[start..start + len],
            _ => &[],
        }
    }

    /// How many messages a period the master hears from these nodes.
    pub fn senders(&self) -> usize {
        self.members.len() - self.parent.iter().flatten().count()
    }
}

/// What a head holds between two batches: each child's latest beat and when it came, and
/// the master's latest answer for each child, handed back on the child's next beat.
#[derive(Debug, Clone)]
pub struct Gather<K: Ord + Clone, B, A> {
    beats: BTreeMap<K, (B, u64)>,
    answers: BTreeMap<K, (A, u64)>,
}

impl<K: Ord + Clone, B, A: Clone> Default for Gather<K, B, A> {
    fn default() -> Self {
        Gather {
            beats: BTreeMap::new(),
            answers: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, B, A: Clone> Gather<K, B, A> {
    /// A child's beat, heard at `now_ms`: it replaces one not yet sent. Returns the
    /// master's latest answer for this child and its age, if the head holds one.
    pub fn beat(&mut self, child: K, beat: B, now_ms: u64) -> Option<(A, u64)> {
        let answer = self
            .answers
            .get(&child)
            .map(|(a, at)| (a.clone(), now_ms.saturating_sub(*at)));
        self.beats.insert(child, (beat, now_ms));
        answer
    }

    /// Whether some child was heard since the last batch (the head then sends one even
    /// if its own beat is not due).
    pub fn pending(&self) -> bool {
        !self.beats.is_empty()
    }

    /// The children heard since the last batch, each with how long ago: for the batch.
    pub fn take(&mut self, now_ms: u64) -> Vec<(K, B, u64)> {
        std::mem::take(&mut self.beats)
            .into_iter()
            .map(|(k, (b, at))| (k, b, now_ms.saturating_sub(at)))
            .collect()
    }

    /// The master answered for `child` at `now_ms`.
    pub fn answered(&mut self, child: K, answer: A, now_ms: u64) {
        self.answers.insert(child, (answer, now_ms));
    }

    /// Keep only what concerns `children` (the head's children changed).
    pub fn retain(&mut self, children: impl Fn(&K) -> bool) {
        self.beats.retain(|k, _| children(k));
        self.answers.retain(|k, _| children(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_has_no_heads() {
        let a = Assignment::new(&[true; 10], 0);
        assert!((0..10).all(|i| a.parent(i).is_none() && a.children(i).is_empty()));
        assert_eq!(a.senders(), 10);
    }

    #[test]
    fn width_nodes_or_fewer_are_flat() {
        let a = Assignment::new(&[true, true, false, true], 3);
        assert!((0..4).all(|i| a.parent(i).is_none() && a.children(i).is_empty()));
        assert_eq!(Assignment::new(&[true; 4], 3).parent(3), Some(0));
    }

    #[test]
    fn blocks_of_width_plus_one_headed_by_their_first_registered_node() {
        // Blocks 0..4, 4..8, 8..12, with 0 and 7 not registered.
        let mut reg = [true; 12];
        reg[0] = false;
        reg[7] = false;
        let a = Assignment::new(&reg, 3);
        assert_eq!(a.children(1), &[2, 3]);
        assert_eq!(a.children(4), &[5, 6]);
        assert_eq!(a.children(8), &[9, 10, 11]);
        assert_eq!(a.parent(3), Some(1));
        assert_eq!(a.parent(6), Some(4));
        assert_eq!(a.parent(11), Some(8));
        for head in [1, 4, 8] {
            assert_eq!(a.parent(head), None);
        }
        // Unregistered and out-of-range nodes beat the master and head nobody.
        assert_eq!(a.parent(0), None);
        assert!(a.children(7).is_empty());
        assert_eq!(a.parent(99), None);
        assert_eq!(a.senders(), 3);
        // A node that goes moves no other block's head.
        reg[5] = false;
        let b = Assignment::new(&reg, 3);
        assert_eq!(b.children(4), &[6]);
        assert_eq!(
            (b.children(1), b.children(8)),
            (a.children(1), a.children(8))
        );
    }

    #[test]
    fn every_registered_node_is_its_own_head_or_the_child_of_exactly_one() {
        for n in [1, 2, 5, 64, 100, 1000] {
            for width in [1, 2, 4, 16, 256] {
                let reg: Vec<bool> = (0..n).map(|i| i % 7 != 3).collect();
                let a = Assignment::new(&reg, width);
                let mut seen = vec![0; n];
                for i in 0..n {
                    if reg[i] && a.parent(i).is_none() {
                        seen[i] += 1;
                        assert!(a.children(i).len() <= width);
                        for &c in a.children(i) {
                            assert_eq!(a.parent(c), Some(i));
                            seen[c] += 1;
                        }
                    }
                }
                for i in 0..n {
                    assert_eq!(seen[i], usize::from(reg[i]), "n {n} width {width} node {i}");
                }
                let members = reg.iter().filter(|r| **r).count();
                let blocks = (0..n.div_ceil(width + 1))
                    .filter(|b| reg[b * (width + 1)..n.min((b + 1) * (width + 1))].contains(&true))
                    .count();
                let senders = if members > width { blocks } else { members };
                assert_eq!(a.senders(), senders, "n {n} width {width}");
            }
        }
    }

    #[test]
    fn a_head_batches_only_children_heard_since_its_last_batch() {
        let mut g: Gather<u32, &str, bool> = Gather::default();
        assert!(!g.pending());
        assert_eq!(g.beat(1, "a", 100), None);
        assert_eq!(g.beat(2, "b", 250), None);
        // A newer beat replaces the one not yet sent, and its time with it.
        g.beat(1, "a2", 300);
        assert!(g.pending());
        assert_eq!(g.take(400), vec![(1, "a2", 100), (2, "b", 150)]);
        assert!(!g.pending());
        assert_eq!(g.take(900), vec![]);
        // The master's answer is handed back on the child's next beat, with its age.
        g.answered(1, true, 410);
        assert_eq!(g.beat(1, "a3", 500), Some((true, 90)));
        assert_eq!(g.beat(2, "b2", 500), None);
        g.retain(|k| *k == 2);
        assert_eq!(g.take(600), vec![(2, "b2", 100)]);
        assert_eq!(g.beat(1, "a4", 700), None);
    }
}
