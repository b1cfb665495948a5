//! The master daemon: one task owns the scheduler core and the job table; thin gRPC
//! services talk to it; the state is kept in SQLite or etcd; output is logged per job.
//!
//! Pure (no tokio, tonic, prometheus, SQLite or etcd): `state`, `job`, `config` (what the
//! state decides with), `msg_jobs`, `error`. Everything else is the daemon around them.

pub mod actor;
pub mod agents;
pub mod auth;
pub mod config;
pub mod connections;
pub mod daemon_config;
pub mod error;
pub mod job;
pub mod metrics;
pub mod msg_jobs;
pub mod notify;
pub mod output;
pub mod persistence;
pub mod placements;
pub mod server;
pub mod service;
pub mod standby;
pub mod state;
pub mod switch_stats;
pub mod unix_socket;
pub mod web;

#[cfg(test)]
mod fuzz_tests;
