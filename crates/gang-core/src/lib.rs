//! The pure core of the gang scheduler.
//!
//! No I/O, no clock, no async: time comes in as an argument and decisions go out as
//! [`plan::Plan`] data. The master daemon and the trace simulator drive the same code.
//!
//! - [`mesh`]: the 2D mesh, request shapes, submeshes, and the rule turning a node count
//!   into a shape.
//! - [`occupancy`]: the busy-node bitmap of one slice; exact allocate and free.
//! - [`alloc`]: Adaptive Scan, First Fit and Best Fit behind the [`alloc::Allocator`] trait.
//! - [`matrix`]: the slice (Ousterhout) matrix with single and multiple tasks.
//! - [`scheduler`]: the queue (FCFS, EASY backfilling), progress under time sharing, and
//!   [`scheduler::Scheduler::check_invariants`], which every test runs after every step.
//! - [`table`]: slice tables, which row runs at instant `t` (the gang executor's schedule).
//! - [`clock`]: clock offset estimation from four-timestamp probes.

pub mod alloc;
pub mod clock;
pub mod matrix;
pub mod mesh;
pub mod occupancy;
pub mod plan;
pub mod replay;
pub mod scheduler;
pub mod table;

pub use alloc::{Allocator, AllocatorKind};
pub use matrix::{Placement, Role, SliceChoice, SliceMatrix};
pub use mesh::{Mesh, Request, Shape, ShapeError, Submesh, shape_for_count};
pub use occupancy::Occupancy;
pub use plan::{Decision, JobId, Plan, SliceId};
pub use replay::{Interval, IntervalTracker, Outcome, WorkloadJob, replay};
pub use scheduler::{Backfill, Config, JobSpec, SchedError, Scheduler};
