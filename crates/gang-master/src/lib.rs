//! The master daemon: one task owns the scheduler core and the job table; thin gRPC
//! services talk to it; the database is SQLite; output is logged per job.

pub mod actor;
pub mod agents;
pub mod auth;
pub mod config;
pub mod connections;
pub mod error;
pub mod etcd_archive;
pub mod etcd_mirror;
pub mod job;
pub mod metrics;
pub mod notify;
pub mod output;
pub mod placements;
pub mod portal;
pub mod revocations;
pub mod server;
pub mod service;
pub mod shim;
pub mod standby_server;
pub mod state;
pub mod state_store;
pub mod store;
pub mod store_etcd;
pub mod switch_stats;
pub mod unix_socket;
pub mod warm_copy;
pub mod web_guard;

#[cfg(test)]
mod fuzz_tests;
