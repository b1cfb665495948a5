//! The master's order key: orders that reach an agent down the order tree (through other
//! agents) carry its signature, so a node that forwards an order (or any node at all)
//! cannot forge one.
//!
//! The key is Ed25519, derived from the master's TLS private key (so it survives a restart
//! of the master, which agents need not re-learn until they register again, and is as
//! secret as that key); its public half goes to each agent with its registration, over
//! the channel on which the agent verified the master's certificate.

use ring::digest::{SHA256, digest};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

/// Domain separation: this derivation's seed is used for nothing else. The words are the
/// key's old name and stay: changing them would change every master's key.
const CONTEXT: &[u8] = b"gang relay key v1\0";

/// The master's signing half.
pub struct OrderSigner {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for OrderSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderSigner")
            .field("public", &self.public_key())
            .finish()
    }
}

impl OrderSigner {
    /// Derived from the master's private key (its PEM text: any type of key).
    pub fn from_master_key(key_pem: &[u8]) -> OrderSigner {
        let seed = digest(&SHA256, &[CONTEXT, key_pem].concat());
        let pair = Ed25519KeyPair::from_seed_unchecked(seed.as_ref())
            .expect("a 32-byte seed is a valid Ed25519 seed");
        OrderSigner { pair }
    }

    /// The public key an agent checks signatures with (32 bytes).
    pub fn public_key(&self) -> Vec<u8> {
        self.pair.public_key().as_ref().to_vec()
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

/// Whether `signature` is `public_key`'s over `message`.
pub fn verify(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(message, signature)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_message_and_key_only() {
        let a = OrderSigner::from_master_key(b"key A");
        let again = OrderSigner::from_master_key(b"key A");
        let b = OrderSigner::from_master_key(b"key B");
        assert_eq!(a.public_key(), again.public_key(), "derived, not random");
        assert_ne!(a.public_key(), b.public_key());
        assert_eq!(a.public_key().len(), 32);
        let sig = a.sign(b"launch job 7");
        assert!(verify(&a.public_key(), b"launch job 7", &sig));
        assert!(!verify(&a.public_key(), b"launch job 8", &sig));
        assert!(!verify(&b.public_key(), b"launch job 7", &sig));
        assert!(!verify(&a.public_key(), b"launch job 7", &sig[..63]));
        assert!(!verify(&[], b"launch job 7", &sig));
        assert!(!format!("{a:?}").contains("seed"));
    }
}
