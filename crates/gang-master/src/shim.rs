//! The old path of `msg_jobs.rs` (the word "shim" is retired): kept only while `state/`
//! and `job/` import `crate::shim`; delete it once they import `crate::msg_jobs`.

pub use crate::msg_jobs::*;
