//! The master's relay key as this agent holds it: set at each registration, read by every
//! relayed order (`relay`). A leaf: `node` keeps one, `relay` reads it.

use std::sync::{Arc, Mutex};

/// The master's relay key, as its registration gave it (none before, or from a master
/// that relays nothing).
#[derive(Debug, Default)]
pub struct RelayKey(Mutex<Option<Arc<[u8]>>>);

impl RelayKey {
    pub fn set(&self, key: &[u8]) {
        *self.0.lock().expect("relay key lock") = (!key.is_empty()).then(|| Arc::from(key));
    }

    pub fn get(&self) -> Option<Arc<[u8]>> {
        self.0.lock().expect("relay key lock").clone()
    }
}
