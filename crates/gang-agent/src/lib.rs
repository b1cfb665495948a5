//! The gang scheduler's node agent: one per mesh node. It registers its coordinate with
//! the master, launches the ranks the master places here, relays their output, reports
//! their exits, and switches them in and out on the master's slice table at the same
//! instants as every other agent (on the master clock, no message per switch). See the
//! crate README for the invariants.
//!
//! ```text
//!  master ── NodeAgent (Launch/Signal/Stdin/SetTable) ──> service ──> node ──> launch ──> rank processes
//!    ^                                                     │  ranks (state)       │ stdout/stderr + exit
//!    ├── AgentRegistry <── registry_client (session, uplink) <── output (outbox) <┘
//!    ├── ClockProbe <── clock (offset, error: atomics) ─────────┐
//!    └── ReportSwitches <── switch::report <── ring <── switch thread (SIGSTOP/CONT, nice, freezer)
//!                                      node ── switch::Switcher (tables + ranks -> plan) ─┘
//! ```

pub mod agent;
pub mod clock;
pub mod config;
pub mod error;
pub mod launch;
pub mod node;
pub mod output;
pub mod ranks;
pub mod registry_client;
pub mod service;
pub mod switch;

pub use agent::{AgentHandle, start};
pub use config::{AgentConfig, Flags, LogFormat};
pub use error::{AgentError, Coord};
