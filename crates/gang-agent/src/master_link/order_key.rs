//! The master's order key (the wire's `relay_key`) as this agent holds it: set at each
//! registration, read by every order that comes down the order tree (`tree::orders`). A leaf:
//! `node` keeps one, `tree::orders` reads it.

use std::sync::{Arc, Mutex};

/// The master's order key, as its registration gave it (none before, or from a master
/// that sends no order down the tree).
#[derive(Debug, Default)]
pub struct OrderKey(Mutex<Option<Arc<[u8]>>>);

impl OrderKey {
    pub fn set(&self, key: &[u8]) {
        *self.0.lock().expect("order key lock") = (!key.is_empty()).then(|| Arc::from(key));
    }

    pub fn get(&self) -> Option<Arc<[u8]>> {
        self.0.lock().expect("order key lock").clone()
    }
}
