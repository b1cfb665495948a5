//! What the scheduler is configured with, what it is given (a job), and how it refuses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::mesh::{Mesh, Shape, Submesh};
use crate::place::PlacerKind;
use crate::plan::JobId;
use crate::time::matrix::SliceChoice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backfill {
    #[default]
    None,
    Easy,
}

impl FromStr for Backfill {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Backfill::None),
            "easy" => Ok(Backfill::Easy),
            _ => Err(format!(
                "unknown backfill policy {s:?}: expected none or easy"
            )),
        }
    }
}

impl fmt::Display for Backfill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backfill::None => "none",
            Backfill::Easy => "easy",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Maximum multiprogramming level: slices that may exist at once (1 = space sharing).
    pub mpl: u32,
    /// The placer. The field keeps its old name, `allocator`, while the master moves to
    /// `PlacerKind` (it builds this struct by field name).
    pub placer: PlacerKind,
    pub backfill: Backfill,
    /// Let running jobs take extra slots where their nodes are free in other slices.
    pub multiple_tasks: bool,
    /// Which slice a job goes into when it fits in several.
    pub slice_choice: SliceChoice,
    /// Fraction of each slot lost to switching when more than one slice exists.
    pub switch_overhead: f64,
    /// How many queued jobs behind the head one backfill pass examines at most.
    pub backfill_depth: usize,
    /// Order the queue by fair share between users (see `fair_share`); false: FCFS.
    #[serde(default = "fair_share_by_default")]
    pub fair_share: bool,
}

fn fair_share_by_default() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mpl: 4,
            placer: PlacerKind::AdaptiveScan,
            backfill: Backfill::None,
            multiple_tasks: true,
            slice_choice: SliceChoice::First,
            switch_overhead: 0.0,
            backfill_depth: 1000,
            fair_share: true,
        }
    }
}

/// A job as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: JobId,
    pub shape: Shape,
    /// Requested run time in seconds (at full speed), if the user gave one. EASY needs it:
    /// a job without one is never backfilled and never ends in a reservation's forecast.
    pub estimate: Option<f64>,
    /// Whose it is (a uid): the queue shares turns between users (`fair_share`).
    #[serde(default)]
    pub user: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedError {
    #[error("job {0} already exists")]
    Duplicate(JobId),
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error("job {job} asks {shape} but the mesh is {mesh} ({placer} does not rotate requests)")]
    NeverFits {
        job: JobId,
        shape: Shape,
        mesh: Mesh,
        placer: PlacerKind,
    },
    #[error("job {job} cannot be put back at {submesh}: no slice has those nodes free")]
    CannotAdopt { job: JobId, submesh: Submesh },
    #[error("node ({x},{y}) is not on the {mesh} mesh")]
    NoSuchNode { x: u32, y: u32, mesh: Mesh },
    #[error("time went backwards: {now} is before {last}")]
    TimeWentBack { now: f64, last: f64 },
    #[error("invalid configuration: {0}")]
    Config(String),
}
