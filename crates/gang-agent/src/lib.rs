//! The gang scheduler's node agent: one per mesh node. It registers its coordinate with
//! the master, launches the ranks the master places here (as their submitter), relays
//! their output, reports their exits, and switches them in and out on the master's slice
//! table at the same instants as every other agent (on the master clock, no message per
//! switch). It speaks only mutual TLS, takes orders only from the master's certificate
//! (`tls`), and keeps its ranks running and switching while the master is silent, for
//! the master's lease (`master_link::lease`). See the crate README for the invariants.
//!
//! ```text
//! master ──NodeAgent──> service ──> node ──> launch ──> ranks (as the submitter)
//!   ^  Launch (+ gang mode),         │        │ output, exit
//!   │  Signal, Stdin, SetTable       │        v
//!   │  (mTLS; tls::only_the_master)  │
//!   ├── AgentRegistry <── session::registry_client <── output (outbox)
//!   │   (mTLS, master.gang)          ├──> master_link::lease (last answer) ──> node.stop_all
//!   │                                │
//!   │                                └──> switch::Switcher ──(ArcSwap plan)──> switch thread (SIGSTOP/CONT, nice, freezer)
//!   │                                     tables + ranks with their launch modes   ^     │
//!   ├── ClockProbe <── probe_clock ── rt::clock::run_probes (offset, error) ───────┘     │
//!   └── ReportSwitches <── report_switches <── switch::report <── ring <─────────────────┘
//!
//! master or node ──NodeRelay──> tree::orders (master's signature checked) ──> node (own part)
//!                                  └──NodeRelay──> subtree heads (gang_core::tree::fanout)
//! ```
//!
//! Folders by subsystem: `master_link` (channel, lease, order key), `session` (the
//! registry session and the uplink), `tree` (the order tree), `peers` (channels to other
//! agents), `launch` (a rank from request to exit report), `switch` (time slicing), `msg`
//! (the messaging library's side and the jobs' key-value spaces), `mpi` (PMI, PMIx, MPI
//! detection and checking), `output` (the outbox), `rt` (the master clock, real-time
//! threads), `emulate` (the emulated fleet, a test tool behind the default feature
//! `emulate`).
//!
//! Module dependencies run one way: `agent` -> {`service`, `tree`, `session`} -> `node`
//! -> {`launch`, `switch`, `master_link`, `rt::clock`}, `launch` -> `switch` ->
//! `rt::clock`, which imports nothing of the agent, nor does `master_link::lease`;
//! `agent` hands the clock and the switch reporter their RPCs, and the lease its stopping,
//! as functions.

pub mod agent;
pub mod config;
#[cfg(feature = "emulate")]
pub mod emulate;
pub mod error;
pub mod guard;
pub mod launch;
pub mod master_link;
pub mod mpi;
pub mod msg;
pub mod node;
pub mod notify;
pub mod output;
pub mod peers;
pub mod ranks;
pub mod request;
pub mod rt;
pub mod service;
pub mod session;
pub mod switch;
pub mod tls;
pub mod tree;

#[cfg(test)]
mod fuzz_tests;

pub use agent::{AgentHandle, start};
pub use config::{AgentConfig, Flags, LogFormat};
pub use error::{AgentError, Coord};
