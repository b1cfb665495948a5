//! The queue and the policy that feeds the slice matrix.
//!
//! Time is an argument: every call takes `now` (seconds, any epoch, never decreasing) and
//! returns a [`Plan`]. Between calls nothing changes, so progress under time sharing is
//! integrated exactly: with `k` slices, a job holding `m` slots runs at `m / k` of full
//! speed, times `1 - switch_overhead` when `k > 1`.
//!
//! Placement (AP/Linux): the head of the queue goes into the first slice where its shape
//! fits (against the home placements there; multiple-task slots in the way are taken
//! back), else into a new slice while there are fewer than `mpl`, else it waits.
//! FCFS: nothing overtakes a waiting head. EASY: the head gets a reservation (the
//! earliest instant, slice and submesh it is guaranteed, assuming every running job ends
//! by its requested time at the slowest rate it can have while the head waits, `1/mpl`),
//! and a later job may start now if it ends by then or keeps off the reserved submesh.
//!
//! The folder: [`Scheduler`] (`scheduler.rs`; EASY in `easy.rs`, the invariants every test
//! checks in `invariants.rs`), what it is configured with (`config.rs`), the queue's order
//! between users ([`fair_share`]), the rules a job waits on before it is queued
//! ([`dependency`], [`array`]), where a step goes inside an allocation ([`steps`]), and a
//! workload replayed through it in virtual time ([`replay`]).

mod config;
mod easy;
mod invariants;
mod scheduler;

pub mod array;
pub mod dependency;
pub mod fair_share;
pub mod replay;
pub mod steps;

pub use config::{Backfill, Config, JobSpec, SchedError};
pub use scheduler::{Pending, Reservation, Scheduler};
