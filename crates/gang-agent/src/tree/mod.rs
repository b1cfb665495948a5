//! The order tree: orders of the master for many nodes (a job's launch and signal, slice
//! tables) carried down a tree of agents (`orders`), checked against the master's key as
//! this agent holds it (`master_link::order_key`), and exits gathered back up a job's tree
//! (`exit_gather`, `exits_up`), over the channels to other agents
//! (`peers`), which the messaging library's fences among agents also travel on; and
//! liveness up the tree (`beats`: heartbeats gathered by liveness heads). `verified`
//! keeps the orders this process already checked.

pub mod beats;
pub mod exit_gather;
pub mod exits_up;
pub mod orders;
pub mod verified;
