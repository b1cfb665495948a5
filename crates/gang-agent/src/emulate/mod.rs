//! The emulated fleet (`--emulate`), a test tool for fleets far larger than the machine,
//! kept out of the production path: many whole agents in one process (`fleet`), whose
//! ranks are played by tasks (`played`), not started.

pub mod fleet;
pub mod played;
