//! What a launch works with of its node: the standing facts the plan reads, and the parts
//! that take the rank over. Given to the pipeline instead of the node, so that `launch`
//! stays below `node` in the module graph.

use std::sync::Arc;

use super::plan::NodeFacts;
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
}
