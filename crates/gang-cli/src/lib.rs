//! Shared code of the user commands `prun` and `gangctl`.
//!
//! - [`connect`]: master addresses, gRPC channels, and the error type both commands print.
//! - [`client_config`]: the master address from the client config file.
//! - [`local_master`]: the per-user file where `gangctl start` leaves its address.
//! - [`gangctl_cli`]: `gangctl`'s subcommands and options.
//! - [`prun_cli`]: `prun`'s options (for completions and man pages too).
//! - [`parse`]: the small syntaxes on the command line (durations, nodes, meshes).
//! - [`gang_mode`]: gang modes (`prun --gang`) as flags and labels.
//! - [`job_filter`]: `gangctl jobs` filters (ids and ranges, user, state, since).
//! - [`output`]: the `cli` / `json` output modes and the views they render.
//! - [`cancel`]: `gangctl cancel` by ids, ranges, user and state.
//! - [`job_update`]: `gangctl hold`, `release` and `update`.
//! - [`matrix_view`]: the slice matrix drawn as text.
//! - [`relay`]: output relay for `prun` (replay de-duplication, `--label` line buffering).
//! - [`acct`]: `gangctl acct`, sacct's columns.
//! - [`attach`]: the attach loop of `prun` and `gangctl attach` (stdin, output, signals,
//!   reconnection); [`job_output`]: `gangctl attach` and `gangctl output`.
//! - [`queue_note`]: what `prun` says while its job waits in the queue.
//! - [`tokens`]: `gangctl token` (get one on the socket, save it) and `gangctl token
//!   revoke`.
//! - [`usage`]: usage errors as getopt prints them, with Slurm hints.
//! - [`timeouts`]: how long both wait for the master (`--timeout`, `GANG_TIMEOUT`).
//! - [`shell_docs`]: shell completions and man pages from the CLI definitions.
//! - [`signals`]: `gangctl start`'s SIGINT, SIGTERM and SIGHUP, taken by a thread of their
//!   own; [`strays`]: orphans adopted by `gangctl start` (a child subreaper), reaped and
//!   stopped.
//!
//! A whole cluster on loopback (`gangctl start`, end-to-end tests) is the `gang-local`
//! crate.

pub mod acct;
pub mod alloc;
pub mod attach;
pub mod batch;
pub mod cancel;
pub mod certs;
pub mod client_config;
pub mod connect;
pub mod error;
pub mod gang_mode;
pub mod gangctl_cli;
pub mod job_filter;
pub mod job_output;
pub mod job_update;
pub mod listing;
pub mod matrix_view;
pub mod output;
pub mod parse;
pub mod prun_cli;
pub mod queue_note;
pub mod relay;
pub mod shell_docs;
pub mod slices_watch;
pub mod start;
pub mod timeouts;
pub mod tokens;
pub mod usage;

#[cfg(test)]
mod fuzz_tests;

pub use connect::CliError;
