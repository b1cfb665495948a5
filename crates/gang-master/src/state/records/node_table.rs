//! The nodes, row-major, with an undo journal like the job table's: while a round is
//! open, the first change to each node keeps its former value. A round used to begin with
//! a copy of every node (their addresses included): at 1,024 nodes that copy and its drop
//! were 40% of the master's CPU during a launch, as every heartbeat is a round of its own
//! on an idle master. Now a round costs what it changes.

use std::ops::{Index, IndexMut};

use crate::state::events::ClockReport;

/// One node as the master knows it: where its agent listens, whether it is up or
/// drained, when it was last heard, its clock and the slice table it has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub address: Option<String>,
    pub up: bool,
    pub drained: bool,
    /// When it was last heard from (the master's responsive time, `Now::live_ns`).
    pub heard_live_ns: i64,
    /// When its last heartbeat came (wall clock, for people).
    pub heartbeat_wall_ns: i64,
    pub clock: ClockReport,
    /// The newest slice table version the agent acknowledged.
    pub table_version: u64,
    /// The last version sent, and when (monotonic): a heartbeat behind it triggers a resend.
    pub table_sent: Option<(u64, i64)>,
    /// A call to it failed to reach it since it was last heard from.
    pub unreachable: bool,
}

#[derive(Debug, Default)]
pub struct NodeTable {
    nodes: Vec<Node>,
    /// While a round is open: each node changed in it, as it was before, in the order of
    /// their first change.
    undo: Option<Vec<(usize, Node)>>,
    /// Whether the node at that index is in `undo` already.
    journaled: Vec<bool>,
}

impl NodeTable {
    pub fn new(count: usize) -> Self {
        NodeTable {
            nodes: vec![Node::default(); count],
            undo: None,
            journaled: vec![false; count],
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Node> {
        self.nodes.iter()
    }

    pub fn begin(&mut self) {
        self.undo = Some(Vec::new());
    }

    pub fn commit(&mut self) {
        for (i, _) in self.undo.take().unwrap_or_default() {
            self.journaled[i] = false;
        }
    }

    pub fn rollback(&mut self) {
        for (i, before) in self.undo.take().unwrap_or_default() {
            self.nodes[i] = before;
            self.journaled[i] = false;
        }
    }
}

impl Index<usize> for NodeTable {
    type Output = Node;

    fn index(&self, i: usize) -> &Node {
        &self.nodes[i]
    }
}

/// A node to change: journaled first, while a round is open.
impl IndexMut<usize> for NodeTable {
    fn index_mut(&mut self, i: usize) -> &mut Node {
        if let Some(undo) = &mut self.undo
            && !self.journaled[i]
        {
            self.journaled[i] = true;
            undo.push((i, self.nodes[i].clone()));
        }
        &mut self.nodes[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolled_back_round_leaves_no_trace_and_a_committed_one_stays() {
        let mut t = NodeTable::new(3);
        t.begin();
        t[1].up = true;
        t[1].address = Some("a:1".into());
        t[2].drained = true;
        t.commit();
        assert!(t[1].up && t[2].drained);

        t.begin();
        t[1].address = Some("b:2".into());
        t[1].up = false;
        t[0].heard_live_ns = 7;
        // Reading does not journal.
        assert!(!t[2].up);
        assert_eq!(t.undo.as_ref().map(Vec::len), Some(2));
        t.rollback();
        assert_eq!(t[1].address.as_deref(), Some("a:1"));
        assert!(t[1].up);
        assert_eq!(t[0], Node::default());
        assert!(t.journaled.iter().all(|j| !j));

        // Outside a round (state built at start-up) nothing is journaled.
        t[0].up = true;
        assert!(t.undo.is_none() && t[0].up);
    }
}
