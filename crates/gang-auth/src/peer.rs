//! The identity in a peer's certificate, as a TLS server sees it after the handshake
//! verified the chain against the cluster CA.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::names::PeerName;

/// The `gang://` name in a certificate (DER), if it has exactly one.
pub fn peer_name(der: &[u8]) -> Option<PeerName> {
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
