//! `gangctl`'s job commands, as Slurm's: listing (`jobs`, `acct`) with squeue/sacct
//! filters, `cancel`, `hold` / `release` / `update`, and a submitted job's output
//! (`attach`, `output`).
//!
//! - [`listing`]: ListJobs a page at a time.
//! - [`job_filter`]: ids and ranges, user, state, since.
//! - [`acct`]: `gangctl acct`, sacct's columns.
//! - [`cancel`]: `gangctl cancel` by ids, ranges, user and state.
//! - [`job_update`]: `gangctl hold`, `release` and `update`.
//! - [`job_output`]: `gangctl attach` and `gangctl output`.

pub mod acct;
pub mod cancel;
pub mod job_filter;
pub mod job_output;
pub mod job_update;
pub mod listing;
