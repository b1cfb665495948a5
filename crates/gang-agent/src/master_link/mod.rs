//! The agent's link to its master: the channel to whichever master leads (`channel`),
//! the registry session and the uplink (`registry_client`), the session on a real-time
//! thread of its own (`session_thread`), and the lease that stops this node's ranks when
//! the master has been silent for too long (`lease`).

pub mod channel;
pub mod lease;
pub mod registry_client;
pub mod session_thread;
