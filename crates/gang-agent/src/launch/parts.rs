//! What a launch works with of its node: the standing facts the plan reads, and the parts
//! that take the rank over. Given to the pipeline instead of the node, so that `launch`
//! stays below `node` in the module graph.

use std::sync::Arc;

use super::plan::NodeFacts;
use crate::launch::usage::UsageBase;
use crate::msg::MsgHub;
use crate::output::Outbox;
use crate::ranks::Ranks;
use crate::switch::Switcher;

#[derive(Debug, Clone)]
pub struct NodeParts {
    pub facts: NodeFacts,
    /// Where the rank is reserved, then counted running, then exited.
    pub ranks: Arc<Ranks>,
    /// Where its output and exit go.
    pub outbox: Arc<Outbox>,
    /// What switches it in and out of its slots.
    pub switch: Arc<Switcher>,
    /// Its messaging directory, key-value space and MPI servers.
    pub msg: Arc<MsgHub>,
    /// Its accounting cgroups (what it used), made at the node's first launch.
    pub usage: Arc<UsageCell>,
}

/// The node's accounting cgroups, found on first use: a node that never launches a real
/// process (an emulated one) makes none.
#[derive(Debug)]
pub struct UsageCell {
    node: crate::error::Coord,
    base: std::sync::OnceLock<Option<UsageBase>>,
}

impl UsageCell {
    pub fn new(node: crate::error::Coord) -> Arc<UsageCell> {
        Arc::new(UsageCell {
            node,
            base: std::sync::OnceLock::new(),
        })
    }

    pub fn base(&self) -> Option<&UsageBase> {
        self.base
            .get_or_init(|| UsageBase::open(self.node))
            .as_ref()
    }
}
