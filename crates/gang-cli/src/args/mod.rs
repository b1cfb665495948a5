//! The command lines of `prun` and `gangctl`: their clap definitions (here rather than in
//! the binaries, so that completions and man pages come from them too), the small syntaxes
//! they parse, and usage errors as getopt prints them.
//!
//! - [`gangctl`]: `gangctl`'s subcommands and options.
//! - [`prun`]: `prun`'s options.
//! - [`parse`]: durations, nodes, meshes.
//! - [`gang_mode`]: gang modes (`prun --gang`) as flags and labels.
//! - [`usage`]: usage errors with Slurm hints.
//! - [`shell_docs`]: shell completions and man pages.

pub mod gang_mode;
pub mod gangctl;
pub mod parse;
pub mod prun;
pub mod shell_docs;
pub mod usage;
