//! What every command line shares, below the commands: the small syntaxes they parse,
//! `prun`'s options (which `gangctl submit` and `alloc` take too), and usage errors as
//! getopt prints them. `gangctl`'s own command line, which names every command's options,
//! stands above them all, in [`crate::gangctl`].
//!
//! - [`prun`]: `prun`'s options (for completions and man pages too).
//! - [`parse`]: durations, nodes, meshes.
//! - [`nodes`]: `-N` and `-n` given together.
//! - [`gang_mode`]: gang modes (`prun --gang`) as flags and labels.
//! - [`usage`]: usage errors with Slurm hints.

pub mod gang_mode;
pub mod nodes;
pub mod parse;
pub mod prun;
pub mod usage;
