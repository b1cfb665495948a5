//! What a job that talks through the messaging library and writes output asks for beyond
//! its shape: its deadlock policy and context mode, the exact deadlock check over the
//! library's counters, and the file name patterns of its output.

pub mod deadlock;
pub mod output_pattern;
