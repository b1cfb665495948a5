//! Thin gRPC adapters: translate requests into state-task commands and results back.

pub mod admin;
pub mod jobs;
pub mod registry;
