//! Time sharing on the agents' clocks: the slice matrix (which jobs share which slots),
//! the slot grid every table shares, the slice tables agents follow on their own clocks,
//! the planner choosing which table is in force when, how a job is switched out of its
//! slots, and the clock offset estimate that keeps the agents' clocks on the master's.

pub mod clock;
pub mod gang_mode;
pub mod grid;
pub mod matrix;
pub mod slicer;
pub mod table;
