//! Time on this node: the agent's view of the master clock (`clock`), that every switch
//! instant is read on, and real-time scheduling for the agent's own threads that user
//! ranks must never starve (`priority`, within the cgroup's `budget`).

pub mod budget;
pub mod clock;
pub mod host_clock;
pub mod priority;
