//! What `prun` (and `gangctl attach`) do while a job runs: the attach loop (stdin,
//! output, signals, reconnection), the output relay, and what `prun` says while its job
//! waits in the queue.
//!
//! - [`attach`]: the attach loop.
//! - [`ends`]: a job's end as an exit code, and what is said with it.
//! - [`relay`]: the output relay (replay de-duplication, `--label` line buffering).
//! - [`queue_note`]: the queue's answer to "why is my job waiting".

pub mod attach;
pub mod ends;
pub mod queue_note;
pub mod relay;
