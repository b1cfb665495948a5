//! Starting a rank and seeing it through to its exit report, as a one-way pipeline:
//!
//! ```text
//! RankRequest ─plan─> LaunchPlan ─look_up─> Found ─Rollback::take─> Given ─spawn_rank─> Spawned ─commit─> Supervisor
//!  (service.rs  (pure:      │     (cwd, program,  (reserve; env, msg dir,  (the command,          (MPI servers, switcher,
//!   converts)   refusals)   │      its MPI: pure   PMI pair, PMIx, cgroup:  as the submitter)      registry; then pumps,
//!                           │      mpi::serve,     given back if dropped)                          wait, drain, exit)
//!                           │      output files,
//!                           │      mpi-check lib)
//! ```
//!
//! - `plan`: the request and the node's facts in, the plan or a refusal out; no I/O, no
//!   clock.
//! - `lookup`: what the plan needs of the file system, before anything is taken, looked
//!   up as the submitting user (`as_user`).
//! - `mpi`: the second pure step, what the rank is served for MPI once `lookup` has read
//!   what its program links (`--mpi auto`).
//! - `rollback`: the side effects, under one guard; `commit` hands them on.
//! - `command`: the rank's environment, the command that starts it, the spawn, its stdin.
//! - `pty`: a rank on a pseudo-terminal (`prun -u`, `--pty`).
//! - `supervisor`: owns the rank from spawn to exit report.
//! - `failure`: what went wrong after the plan, worded with the plan's names.
//! - `start`: the steps, in order.
//!
//! The pipeline is given the node's parts it works with (`NodeParts`), not the node:
//! this module stays below `node` in the module graph.

mod as_user;
pub mod command;
pub mod env_policy;
mod failure;
mod lookup;
pub mod mpi;
pub(crate) mod parts;
pub mod plan;
mod pty;
pub mod rank_files;
mod rollback;
mod start;
pub mod supervisor;
pub mod usage;

pub use parts::{NodeParts, UsageCell};
pub use plan::{LaunchPlan, LaunchPolicy, NodeFacts, plan};
pub use start::start;
pub use supervisor::{PIPE_DRAIN, Supervisor};
