//! What the state keeps of jobs and nodes, each with an undo journal so that a round taken
//! back is taken back exactly: the job table, the node table, and what each user has
//! queued.

pub mod gate_index;
pub mod jobs;
pub mod node_table;
pub mod queued;
