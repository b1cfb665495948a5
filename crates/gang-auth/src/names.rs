//! The names in certificates. A certificate's identity is a URI subject alternative name
//! under `gang://`; servers also carry a DNS name that clients verify the connection by
//! (the network address says nothing: agents move, ports are ephemeral).

use std::fmt;

const SCHEME: &str = "gang://";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PeerName {
    Master,
    /// The agent of node (x, y): it may speak for that node only.
    Node {
        x: u32,
        y: u32,
    },
    /// A user with a client certificate (a Unix user name).
    User(String),
}

impl PeerName {
    /// The URI subject alternative name.
    pub fn uri(&self) -> String {
        match self {
            PeerName::Master => format!("{SCHEME}master"),
            PeerName::Node { x, y } => format!("{SCHEME}node/{x}/{y}"),
            PeerName::User(u) => format!("{SCHEME}user/{u}"),
        }
    }

    pub fn from_uri(uri: &str) -> Option<PeerName> {
        let rest = uri.strip_prefix(SCHEME)?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["master"] => Some(PeerName::Master),
            ["node", x, y] => Some(PeerName::Node {
                x: x.parse().ok()?,
                y: y.parse().ok()?,
            }),
            ["user", u] if valid_user(u) => Some(PeerName::User(u.to_string())),
            _ => None,
        }
    }

    /// The DNS name a server with this identity is verified by.
    pub fn dns(&self) -> String {
        match self {
            PeerName::Master => MASTER_DNS.to_string(),
            PeerName::Node { x, y } => node_dns(*x, *y),
            PeerName::User(u) => format!("user-{u}.gang"),
        }
    }
}

impl fmt::Display for PeerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerName::Master => f.write_str("the master"),
            PeerName::Node { x, y } => write!(f, "node ({x},{y})"),
            PeerName::User(u) => write!(f, "user {u}"),
        }
    }
}

/// Agents verify the master by this name, whatever address they reach it at.
pub const MASTER_DNS: &str = "master.gang";

/// The master verifies the agent of node (x, y) by this name.
pub fn node_dns(x: u32, y: u32) -> String {
    format!("node-{x}-{y}.gang")
}

/// A name usable in a certificate and a file name: what `useradd` accepts, roughly.
pub fn valid_user(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= 32
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !u.starts_with(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_odd_ones_are_refused() {
        for n in [
            PeerName::Master,
            PeerName::Node { x: 3, y: 12 },
            PeerName::User("alice_1".into()),
        ] {
            assert_eq!(PeerName::from_uri(&n.uri()), Some(n));
        }
        for bad in [
            "gang://node/1",
            "gang://node/a/1",
            "gang://user/../etc",
            "gang://user/",
            "https://master",
            "gang://master/x",
        ] {
            assert_eq!(PeerName::from_uri(bad), None, "{bad}");
        }
        assert_eq!(PeerName::Node { x: 1, y: 2 }.dns(), "node-1-2.gang");
        assert_eq!(PeerName::Node { x: 1, y: 2 }.to_string(), "node (1,2)");
    }
}
