//! The gang scheduler's node agent: one per mesh node. It registers its coordinate with
//! the master, launches the ranks the master places here, relays their output, and
//! reports their exits. See the crate README for the invariants.
//!
//! ```text
//!  master ── NodeAgent (Launch/Signal/Stdin/Probe) ──> service ──> node ──> launch ──> rank processes
//!    ^                                                              │  ranks (state)       │ stdout/stderr
//!    └── AgentRegistry <── registry_client (session, uplink) <── output (outbox) <─────────┘ + exit
//! ```

pub mod agent;
pub mod config;
pub mod error;
pub mod launch;
pub mod node;
pub mod output;
pub mod ranks;
pub mod registry_client;
pub mod service;

pub use agent::{AgentHandle, start};
pub use config::{AgentConfig, Flags, LogFormat};
pub use error::{AgentError, Coord};
