//! Shared code of the user commands `prun` and `gangctl`, by subsystem, the highest
//! first (a module imports only those below it):
//!
//! - [`gangctl`]: `gangctl`'s command line, the dispatch to each subcommand, its usage
//!   errors, completions and man pages.
//! - [`start`]: `gangctl start`'s options; the cluster it starts is driven by
//!   [`gang_local::driver`].
//! - [`alloc`]: Slurm-style allocations (`gangctl alloc`), which hold nodes for steps.
//! - [`batch`]: batch scripts (`gangctl submit job.sh`, `#GANG` directives).
//! - [`jobs`]: `gangctl`'s job commands (listing, filters, acct, cancel, hold/update,
//!   output).
//! - [`prun`]: the attach loop, the output relay, the queue note.
//! - [`connect`]: reaching the master (addresses, channels, the client config, tokens,
//!   certificates).
//! - [`output`]: the `cli` / `json` output modes and the views they render (the slice
//!   matrix among them).
//! - [`args`]: what every command line shares (small syntaxes, `prun`'s options, usage
//!   errors).
//! - [`error`]: the error both commands print, and the master's default address;
//!   [`timeouts`]: how long both wait for the master (`--timeout`, `GANG_TIMEOUT`).

pub mod alloc;
pub mod args;
pub mod batch;
pub mod connect;
pub mod error;
pub mod gangctl;
pub mod jobs;
pub mod output;
pub mod prun;
pub mod start;
pub mod timeouts;

#[cfg(test)]
mod fuzz_tests;

pub use connect::CliError;
