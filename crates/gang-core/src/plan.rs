//! Decisions as data: what the scheduler decided, for a daemon or the simulator to carry out.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::mesh::Submesh;

/// A job's identity, the same in the core, the database and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A slice (a row of the Ousterhout matrix). Ids are never reused, so a placement
/// interval names its slice unambiguously even after slices are dropped and created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SliceId(pub u32);

impl fmt::Display for SliceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// One decision, in the order it must be carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Decision {
    /// Open a new slice (appended after the existing ones in round-robin order).
    NewSlice { slice: SliceId },
    /// Start `job` on `submesh`, with `slice` as its own (home) slot.
    Start {
        job: JobId,
        slice: SliceId,
        submesh: Submesh,
    },
    /// `job` also runs in `slice`, on the same nodes (a multiple task).
    AddSlot { job: JobId, slice: SliceId },
    /// `job` no longer runs in `slice` (a multiple-task slot given up to a new job, or its
    /// slice dropped). Its other slots are unaffected.
    RemoveSlot { job: JobId, slice: SliceId },
    /// `job` has left the matrix: `submesh` is free in every slot it held.
    Free { job: JobId, submesh: Submesh },
    /// `slice` has no job of its own left and is eliminated.
    DropSlice { slice: SliceId },
    /// EASY backfilling: the head of the queue `job` is guaranteed to start by `at`
    /// (given the running jobs' requested times); later jobs were started only where
    /// they cannot delay that.
    Reserve {
        job: JobId,
        at: f64,
        slice: SliceId,
        submesh: Submesh,
    },
}

/// The decisions taken at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub now: f64,
    pub decisions: Vec<Decision>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }

    /// Jobs started by this plan, in order.
    pub fn started(&self) -> impl Iterator<Item = (JobId, SliceId, Submesh)> + '_ {
        self.decisions.iter().filter_map(|d| match *d {
            Decision::Start {
                job,
                slice,
                submesh,
            } => Some((job, slice, submesh)),
            _ => None,
        })
    }
}
