//! Why a queued job is kept out of the scheduler's queue: the answer each policy gives.

use gang_core::JobId;
use gang_core::schedule::dependency::{Dep, Upstream};

use crate::job::Hold;

/// Why a queued job is kept out of the core's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::state) enum Gate {
    Held(Hold),
    Dependency(Dep),
    /// Its array has this many tasks queued for nodes or running: its limit.
    Throttled {
        array: JobId,
        limit: u32,
    },
    /// A dependency that can never hold: the job ends.
    Never(Dep, Upstream),
}
