//! Trace-driven simulation of the gang scheduler: SWF parsing, workload mapping, replay
//! through `gang-core` in virtual time, and the figures (`gang-sim` is the command).

pub mod report;
pub mod sim;
pub mod swf;
