//! The pure core of the gang scheduler.
//!
//! No I/O, no clock, no async: time comes in as an argument and decisions go out as
//! [`plan::Plan`] data. The master daemon and the trace simulator drive the same code.
//!
//! - [`mesh`]: the 2D mesh, request shapes, submeshes, the rule turning a node count into
//!   a shape, and [`mesh::occupancy`], the busy-node bitmap of one slice.
//! - [`place`]: the placers (Adaptive Scan, First Fit, Best Fit) behind [`place::Placer`].
//! - [`time`]: the slice (Ousterhout) matrix, the slot grid, slice tables and their
//!   planner, gang modes, and clock offset estimation.
//! - [`schedule`]: the queue (FCFS, EASY backfilling, fair share), progress under time
//!   sharing and [`Scheduler::check_invariants`], which every test runs after every step;
//!   dependencies, job arrays, steps inside an allocation, and workload replay.
//! - [`job`]: deadlock detection and a job's deadlock and context words; output file
//!   name patterns.
//! - [`tree`]: the order tree's shape and the bound of a subtree.
//! - [`plan`]: decisions as data; [`quantile`]: nearest-rank quantiles for every p50/p99.

pub mod job;
pub mod mesh;
pub mod place;
pub mod plan;
pub mod quantile;
pub mod schedule;
pub mod time;
pub mod tree;

pub use job::deadlock::{DeadlockPolicy, MsgContext};
pub use mesh::occupancy::Occupancy;
pub use mesh::{Mesh, Request, Shape, ShapeError, Submesh, shape_for_count};
pub use place::{Placer, PlacerKind};
pub use plan::{Decision, JobId, Plan, SliceId};
pub use schedule::replay::{Interval, IntervalTracker, Outcome, WorkloadJob, replay};
pub use schedule::{Backfill, Config, JobSpec, Pending, SchedError, Scheduler};
pub use time::gang_mode::GangMode;
pub use time::grid::SlotGrid;
pub use time::matrix::{Placement, Role, SliceChoice, SliceMatrix};
pub use time::slicer::Slicer;
pub use time::table::SliceTable;
