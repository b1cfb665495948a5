//! What the agent holds of its master, below everything that talks to it: the channel to
//! whichever master leads (`channel`), the lease that stops this node's ranks when the
//! master has been silent for too long (`lease`), and the master's key for orders that
//! come down the order tree (`order_key`). The RPC loops that use them are `session`.

pub mod channel;
pub mod lease;
pub mod order_key;
