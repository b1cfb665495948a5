//! The identity in a peer's certificate, as a TLS server sees it after the handshake
//! verified the chain against the cluster CA.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::names::PeerName;

/// How many certificates' names `peer_name` keeps: more than a 10,000-node cluster's
/// agents and users; past it the cache starts again.
const KNOWN_MAX: usize = 32_768;

/// Certificates (DER) and the names in them.
type Known = HashMap<Box<[u8]>, Option<PeerName>>;

/// The `gang://` name in a certificate (DER), if it has exactly one.
///
/// Every call the master takes asks it (a heartbeat batch, an exit report), and parsing the
/// certificate was 3 % of the master's time during a 10,000-node launch; a certificate's
/// name never changes, so each is parsed once. Only certificates the TLS handshake
/// verified against the cluster CA get here, so the cache holds no stranger's.
pub fn peer_name(der: &[u8]) -> Option<PeerName> {
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(name) = known.lock().ok()?.get(der) {
        return name.clone();
    }
    let name = parse_peer_name(der);
    let mut known = known.lock().ok()?;
    if known.len() >= KNOWN_MAX {
        known.clear();
    }
    known.insert(der.into(), name.clone());
    name
}

fn parse_peer_name(der: &[u8]) -> Option<PeerName> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let mut names = san.value.general_names.iter().filter_map(|g| match g {
        GeneralName::URI(u) => PeerName::from_uri(u),
        _ => None,
    });
    let first = names.next()?;
    // Two identities in one certificate is one too many.
    names.next().is_none().then_some(first)
}
