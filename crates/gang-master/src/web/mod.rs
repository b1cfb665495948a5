//! Browsers on the client port: the reference portal page (`portal.rs`) and the guard on
//! what a browser may send (`guard.rs`), beside gRPC-Web and CORS (`server.rs`).

pub mod guard;
pub mod portal;
