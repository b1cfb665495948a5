//! The shape of the order tree: who forwards an order to whom.
//!
//! An order for nodes `0..n` (in the order the master lists them) is split into at most
//! `width` contiguous subtrees; the first node of each does its part and splits the rest
//! of its range the same way. Every node is then at most `depth(n, width)` hops from the
//! master, and a node's place in the tree is a range of indices: nothing else travels.

use std::ops::Range;

/// The subtrees of `range` for a sender that is not itself in it (the master): at most
/// `width` contiguous ranges covering it, sizes differing by at most one.
pub fn split(range: Range<usize>, width: usize) -> Vec<Range<usize>> {
    let n = range.len();
    let parts = width.max(1).min(n);
    let mut out = Vec::with_capacity(parts);
    let mut start = range.start;
    for i in 0..parts {
        let len = n / parts + usize::from(i < n % parts);
        out.push(start..start + len);
        start += len;
    }
    out
}

/// The subtrees a node that heads `range` forwards to: its range less itself, split.
pub fn children(range: Range<usize>, width: usize) -> Vec<Range<usize>> {
    if range.is_empty() {
        return Vec::new();
    }
    split(range.start + 1..range.end, width)
}

/// How many levels of agents a subtree of `n` nodes has (1 for a single node).
pub fn depth(n: usize, width: usize) -> u32 {
    if n <= 1 {
        return n as u32;
    }
    // The largest child subtree decides: the first of the split is never smaller.
    let rest = n - 1;
    let parts = width.max(1).min(rest);
    1 + depth(rest.div_ceil(parts), width)
}

/// Where index `r` of `0..n` sits in the tree that gathers toward index 0: the relay tree
/// with index 0 (the first subtree's head) standing in for the master, so the other
/// subtrees' heads answer to it. What a fence among a job's agents follows (rank r on
/// its r-th node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

pub fn links(n: usize, width: usize, r: usize) -> Links {
    assert!(r < n, "index {r} of {n}");
    let top = split(0..n, width);
    let mut parent = None;
    let mut range = top
        .iter()
        .find(|t| t.contains(&r))
        .expect("split covers 0..n")
        .clone();
    if range.start != 0 {
        parent = Some(0);
    }
    while range.start != r {
        let child = children(range.clone(), width)
            .into_iter()
            .find(|c| c.contains(&r))
            .expect("children cover the rest of a range");
        parent = Some(range.start);
        range = child;
    }
    let mut kids: Vec<usize> = children(range, width).iter().map(|c| c.start).collect();
    if r == 0 {
        kids.extend(top.iter().skip(1).map(|t| t.start));
    }
    Links {
        parent,
        children: kids,
    }
}

/// A node coordinate packed as orders list them (`x << 16 | y`; meshes are under 65,536
/// a side).
pub fn pack(x: u32, y: u32) -> u32 {
    (x << 16) | (y & 0xffff)
}

pub fn unpack(v: u32) -> (u32, u32) {
    (v >> 16, v & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every node of 0..n, reached once, following the tree from the master.
    fn reached(n: usize, width: usize) -> (Vec<usize>, u32) {
        fn walk(r: Range<usize>, width: usize, level: u32, seen: &mut Vec<usize>) -> u32 {
            if r.is_empty() {
                return level - 1;
            }
            seen.push(r.start);
            children(r, width)
                .into_iter()
                .map(|c| walk(c, width, level + 1, seen))
                .max()
                .unwrap_or(level)
        }
        let mut seen = Vec::new();
        let deepest = split(0..n, width)
            .into_iter()
            .map(|r| walk(r, width, 1, &mut seen))
            .max()
            .unwrap_or(0);
        seen.sort_unstable();
        (seen, deepest)
    }

    #[test]
    fn sixteen_wide_reaches_ten_thousand_nodes_in_four_hops() {
        assert_eq!(split(0..10, 4), vec![0..3, 3..6, 6..8, 8..10]);
        assert_eq!(children(3..6, 4), vec![4..5, 5..6]);
        assert_eq!(children(5..6, 4), Vec::<Range<usize>>::new());
        let (seen, deepest) = reached(10_000, 16);
        assert_eq!(seen, (0..10_000).collect::<Vec<_>>());
        assert_eq!(deepest, 4);
        assert_eq!(depth(10_000usize.div_ceil(16), 16), 4);
        // Flat is a tree of width n.
        assert_eq!(reached(256, 256).1, 1);
        assert_eq!(pack(3, 65_535), 3 << 16 | 65_535);
        assert_eq!(unpack(pack(99, 100)), (99, 100));
    }

    #[test]
    fn the_gathering_tree_is_the_relay_tree_rooted_at_index_zero() {
        // 10 two wide: the master's subtrees 0..5 and 5..10; 5 answers to 0.
        assert_eq!(
            links(10, 2, 0),
            Links {
                parent: None,
                children: vec![1, 3, 5]
            }
        );
        assert_eq!(links(10, 2, 5).parent, Some(0));
        assert_eq!(links(10, 2, 5).children, vec![6, 8]);
        assert_eq!(links(10, 2, 4).parent, Some(3));
        // Flat (n within the width): a star at 0.
        assert_eq!(links(4, 16, 0).children, vec![1, 2, 3]);
        assert_eq!(links(4, 16, 3).parent, Some(0));
        assert_eq!(
            links(1, 16, 0),
            Links {
                parent: None,
                children: vec![]
            }
        );
    }

    proptest! {
        #[test]
        fn parents_and_children_agree_and_reach_every_index(n in 1usize..2_000, width in 1usize..40) {
            let mut seen = vec![0usize; n];
            for r in 0..n {
                let l = links(n, width, r);
                prop_assert_eq!(l.parent.is_none(), r == 0);
                for &c in &l.children {
                    prop_assert_eq!(links(n, width, c).parent, Some(r));
                    seen[c] += 1;
                }
            }
            prop_assert_eq!(seen[0], 0);
            prop_assert!(seen[1..].iter().all(|&k| k == 1));
        }

        #[test]
        fn every_node_is_reached_once_within_the_depth(n in 0usize..3_000, width in 1usize..40) {
            let (seen, deepest) = reached(n, width);
            prop_assert_eq!(seen, (0..n).collect::<Vec<_>>());
            let bound = split(0..n, width).iter().map(|r| depth(r.len(), width)).max().unwrap_or(0);
            prop_assert_eq!(deepest, bound);
            for r in split(0..n, width) {
                prop_assert!(r.len() <= n.div_ceil(width.max(1)));
            }
        }
    }
}
