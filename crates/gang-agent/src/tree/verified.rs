//! Orders this process already checked and decoded. An emulated fleet runs hundreds of
//! nodes in one process, and each checked and decoded every order: at 1,024 emulated
//! nodes, 12 % of a fleet process's CPU went to Ed25519 checks of the same few orders, and
//! at 10,000, 5 % to decoding their node lists (10,000 entries, at every node). A real
//! agent is one node and opens each order once; the cache changes nothing for it but the
//! rare order that comes twice (around a slow head).
//!
//! Trust: a hit is a byte-for-byte match of key, order and signature with a triple that
//! passed `order_key::verify`, so it passes again, and its decoding is that of the same
//! bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use gang_core::tree::fanout;
use gang_proto::v1::RelayOrder;
use prost::Message;

/// How many checked orders are kept: the orders of the launches and tables in flight at
/// once (an order is at most a few hundred KB: its node list).
const KEPT: usize = 8;

/// A checked order, decoded, with its nodes unpacked.
#[derive(Debug)]
pub struct Opened {
    pub order: RelayOrder,
    pub nodes: Arc<[(u32, u32)]>,
}

/// Why an order was not opened.
#[derive(Debug, PartialEq)]
pub enum Unopened {
    NotSigned,
    Undecodable(String),
}

struct Entry {
    key: Vec<u8>,
    bytes: Vec<u8>,
    signature: Vec<u8>,
    opened: Arc<Opened>,
}

static CHECKED: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());

/// The order, if `signature` is the master's (`key`) over `bytes` and they decode: from
/// the cache, or checked, decoded and then kept.
pub fn open(key: &[u8], bytes: &[u8], signature: &[u8]) -> Result<Arc<Opened>, Unopened> {
    let hit = |e: &&Entry| e.signature == signature && e.key == key && e.bytes == bytes;
    if let Some(e) = CHECKED.lock().expect("checked orders").iter().find(hit) {
        return Ok(Arc::clone(&e.opened));
    }
    if !gang_auth::order_key::verify(key, bytes, signature) {
        return Err(Unopened::NotSigned);
    }
    let order = RelayOrder::decode(bytes).map_err(|e| Unopened::Undecodable(e.to_string()))?;
    let nodes = order.nodes.iter().map(|&v| fanout::unpack(v)).collect();
    let opened = Arc::new(Opened { order, nodes });
    let mut kept = CHECKED.lock().expect("checked orders");
    // Another node of this process may have opened it meanwhile.
    if kept.iter().any(|e| hit(&e)) {
        return Ok(opened);
    }
    if kept.len() == KEPT {
        kept.pop_front();
    }
    kept.push_back(Entry {
        key: key.to_vec(),
        bytes: bytes.to_vec(),
        signature: signature.to_vec(),
        opened: Arc::clone(&opened),
    });
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_auth::order_key::OrderSigner;

    fn order(expires_ns: i64) -> Vec<u8> {
        RelayOrder {
            expires_ns,
            nodes: vec![fanout::pack(3, 1), fanout::pack(0, 2)],
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// A checked order opens again, the same; the same signature with another order or
    /// key, or a forged one, does not, whatever the cache holds; signed garbage is
    /// undecodable.
    #[test]
    fn only_an_exact_checked_order_is_taken_from_the_cache() {
        let master = OrderSigner::from_master_key(b"verified cache test");
        let other = OrderSigner::from_master_key(b"another master");
        let (key, seven) = (master.public_key(), order(7));
        let sig = master.sign(&seven);
        let first = open(&key, &seven, &sig).unwrap();
        assert_eq!(first.order.expires_ns, 7);
        assert_eq!(&*first.nodes, &[(3, 1), (0, 2)]);
        let again = open(&key, &seven, &sig).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "again, from the cache");
        assert_eq!(
            open(&key, &order(8), &sig).unwrap_err(),
            Unopened::NotSigned
        );
        let stranger = other.public_key();
        assert_eq!(
            open(&stranger, &seven, &sig).unwrap_err(),
            Unopened::NotSigned
        );
        let mut forged = sig.clone();
        forged[0] ^= 1;
        assert_eq!(
            open(&key, &seven, &forged).unwrap_err(),
            Unopened::NotSigned
        );
        let garbage = [0xff_u8; 9];
        let e = open(&key, &garbage, &master.sign(&garbage)).unwrap_err();
        assert!(matches!(e, Unopened::Undecodable(_)), "{e:?}");
        // Many other orders later, the first is checked again, not lost.
        for i in 0..2 * KEPT as i64 {
            let o = order(100 + i);
            assert!(open(&key, &o, &master.sign(&o)).is_ok());
        }
        assert_eq!(open(&key, &seven, &sig).unwrap().order.expires_ns, 7);
    }
}
