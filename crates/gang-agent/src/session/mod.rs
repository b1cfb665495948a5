//! The agent's side of the master's AgentRegistry: the registry session (Register, then
//! Heartbeat) and the uplink of output and exits (`registry_client`), and the session on
//! a real-time thread of its own (`thread`). What they learn of the master is kept in
//! `master_link`.

pub mod beat;
pub mod exits_sender;
pub mod registry_client;
pub mod thread;
