//! Shared code of the user commands `prun` and `gangctl`, by subsystem:
//!
//! - [`args`]: the command lines (clap definitions, small syntaxes, usage errors,
//!   completions and man pages).
//! - [`connect`]: reaching the master (addresses, channels, the client config, tokens,
//!   certificates).
//! - [`error`]: the error both commands print, and the master's default address;
//!   [`timeouts`]: how long both wait for the master (`--timeout`, `GANG_TIMEOUT`).
//! - [`jobs`]: `gangctl`'s job commands (listing, filters, acct, cancel, hold/update,
//!   output).
//! - [`prun`]: the attach loop, the output relay, the queue note.
//! - [`batch`]: batch scripts (`gangctl submit job.sh`, `#GANG` directives).
//! - [`alloc`]: Slurm-style allocations (`gangctl alloc`), which hold nodes for steps.
//! - [`output`]: the `cli` / `json` output modes and the views they render.
//! - [`start`]: `gangctl start`'s options; the cluster it starts is driven by
//!   [`gang_local::driver`].
//!
//! Imports run down that list's reverse: `args`, `error` and `output`'s formatting import
//! nothing of the commands; the commands import them.

pub mod alloc;
pub mod args;
pub mod batch;
pub mod connect;
pub mod error;
pub mod jobs;
pub mod output;
pub mod prun;
pub mod start;
pub mod timeouts;

#[cfg(test)]
mod fuzz_tests;

pub use connect::CliError;

// old path, kept while callers move
pub use connect::client_config;
// old path, kept while callers move
pub use jobs::listing;
