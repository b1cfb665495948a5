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
//! - [`grid`]: the slot grid, the one place that knows which slot an instant is in.
//! - [`table`]: slice tables, which row runs at instant `t` (the gang executor's schedule).
//! - [`slicer`]: the slice-table planner (which table the master publishes, and when it
//!   takes effect) and run-time accounting under the tables.
//! - [`gang_mode`]: how a job is switched out of its slots.
//! - [`deadlock`]: exact deadlock detection over the messaging library's counters, and
//!   the per-job deadlock policy and context mode words.
//! - [`quantile`]: nearest-rank quantiles for every reported p50/p99.
//! - [`clock`]: clock offset estimation from four-timestamp probes.
//! - [`fanout`]: the relay tree's shape (who forwards an order to whom).
//! - [`dependency`]: job dependencies (`afterok:12`) and their verdicts; [`array`]: job
//!   array index lists (`1-100%10`).
//! - [`output_pattern`]: `prun --output/--error` file name patterns (`%j`, `%r`, `%n`).

pub mod alloc;
pub mod array;
pub mod clock;
pub mod deadlock;
pub mod dependency;
pub mod fair_share;
pub mod fanout;
pub mod gang_mode;
pub mod grid;
pub mod matrix;
pub mod mesh;
pub mod occupancy;
pub mod output_pattern;
pub mod plan;
pub mod quantile;
pub mod replay;
pub mod scheduler;
pub mod slicer;
pub mod steps;
pub mod table;

pub use alloc::{Allocator, AllocatorKind};
pub use deadlock::{DeadlockPolicy, MsgContext};
pub use gang_mode::GangMode;
pub use grid::SlotGrid;
pub use matrix::{Placement, Role, SliceChoice, SliceMatrix};
pub use mesh::{Mesh, Request, Shape, ShapeError, Submesh, shape_for_count};
pub use occupancy::Occupancy;
pub use plan::{Decision, JobId, Plan, SliceId};
pub use replay::{Interval, IntervalTracker, Outcome, WorkloadJob, replay};
pub use scheduler::{Backfill, Config, JobSpec, Pending, SchedError, Scheduler};
pub use slicer::Slicer;
pub use table::SliceTable;
