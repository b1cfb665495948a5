//! Shared code of the user commands `prun` and `gangctl`.
//!
//! - [`connect`]: master addresses, gRPC channels, and the error type both commands print.
//! - [`parse`]: the small syntaxes on the command line (durations, nodes, meshes).
//! - [`gang_mode`]: gang modes (`prun --gang`) as flags and labels.
//! - [`output`]: the `cli` / `json` output modes and the views they render.
//! - [`matrix_view`]: the slice matrix drawn as text.
//! - [`relay`]: output relay for `prun` (replay de-duplication, `--label` line buffering).
//! - [`attach`]: `prun`'s attach loop (stdin, output, signals, reconnection).
//! - [`local_cluster`]: a whole cluster on loopback (`gangctl start`, end-to-end tests).

pub mod attach;
pub mod client_config;
pub mod connect;
pub mod gang_mode;
pub mod local_cluster;
pub mod matrix_view;
pub mod output;
pub mod parse;
pub mod relay;

pub use connect::CliError;
pub use local_cluster::{LocalCluster, LocalClusterOptions};
