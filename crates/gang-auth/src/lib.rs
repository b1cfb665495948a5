//! Who is who in a gang cluster.
//!
//! - [`names`]: the names certificates carry: the master, node (x,y), user NAME, as URI
//!   subject alternative names (`gang://master`, `gang://node/3/2`, `gang://user/alice`),
//!   and the DNS names servers are verified by (`master.gang`, `node-3-2.gang`).
//! - [`pki`]: the cluster CA and the certificates it signs (`gangctl certs init`).
//! - [`peer`]: the name in a peer's certificate, as a TLS server sees it.
//! - [`token`]: signed, expiring tokens the master issues to users it identified locally;
//!   each names its user (looked up again at every use) and has an id to be revoked by.
//! - [`users`]: Unix users and their groups.
//! - [`order_key`]: the master's signature on the orders agents forward down the order
//!   tree.
//!
//! No cryptography is written here: certificates come from `rcgen`, parsing from
//! `x509-parser`, tokens from `jsonwebtoken` (HS256), randomness and the order
//! key's Ed25519 from `ring`.

pub mod names;
pub mod order_key;
pub mod peer;
pub mod pki;
pub mod token;
pub mod users;

pub use names::PeerName;
pub use users::Identity;
