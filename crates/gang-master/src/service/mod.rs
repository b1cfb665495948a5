//! Thin gRPC adapters: requests become state-task commands in domain terms
//! (`convert.rs`), and answers and errors go back as protobuf.

pub mod admin;
pub mod attach_slots;
pub mod convert;
pub mod job_info;
pub mod jobs;
pub mod registry;
pub mod tokens;
pub mod watch;
