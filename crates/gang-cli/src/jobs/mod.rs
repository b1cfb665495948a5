//! `gangctl`'s job commands, as Slurm's: listing (`jobs`, `acct`) with squeue/sacct
//! filters, `cancel`, `hold` / `release` / `update`, and a submitted job's output
//! (`attach`, `output`).
//!
//! - [`listing`]: ListJobs a page at a time.
//! - [`job_ref`]: jobs as named (`12`, `5-9`, `12.1`, `17_10`, `17_[1-4]`, `last`);
//!   [`resolve`]: those turned into job ids at the master.
//! - [`job_filter`]: the ids named, user, state, since.
//! - [`acct`]: `gangctl acct`, sacct's columns ([`acct_format`]: `--format`, `%N` widths).
//! - [`cancel`]: `gangctl cancel` by ids, ranges, user and state.
//! - [`job_update`]: `gangctl hold`, `release` and `update`.
//! - [`job_output`]: `gangctl attach` and `gangctl output`.

pub mod acct;
pub mod acct_format;
pub mod cancel;
pub mod job_filter;
pub mod job_output;
pub mod job_ref;
pub mod job_update;
pub mod listing;
pub mod resolve;
