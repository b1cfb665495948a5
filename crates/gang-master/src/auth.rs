//! Who is calling, from the connection and never from the request: the peer credentials of
//! the Unix socket (local clients), a user certificate or a token (remote clients over
//! TLS), or a node certificate (agents, on their own port).

use std::time::{SystemTime, UNIX_EPOCH};

use gang_auth::names::PeerName;
use gang_auth::peer::peer_name;
use gang_auth::token::{TokenError, TokenKey};
use gang_auth::users::Identity;
use tonic::Request;
use tonic::transport::server::TlsConnectInfo;

use crate::config::AuthPolicy;
use crate::connections::{ConnInfo, Peer};
use crate::error::{MasterError, Result};
use crate::state::events::{Caller, Owner};
use crate::state::views::Coord;

pub struct Authenticator {
    policy: AuthPolicy,
    tokens: TokenKey,
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The certificate the TLS handshake verified, if any (the leaf comes first).
fn peer<T>(req: &Request<T>) -> Option<PeerName> {
    // The listeners wrap their connections (`connections/`), so tonic's `peer_certs`,
    // which knows only its own TCP type, finds nothing: look inside our own.
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<ConnInfo>>()?
        .peer_certs()?;
    peer_name(certs.first()?.as_ref())
}

impl Authenticator {
    pub fn new(policy: AuthPolicy, tokens: TokenKey) -> Self {
        Authenticator { policy, tokens }
    }

    fn caller_of(&self, id: Identity) -> Caller {
        let admin = id.uid == 0
            || self.policy.admins.contains(&id.user)
            || id.groups.iter().any(|g| self.policy.admin_gids.contains(g));
        Caller {
            owner: Owner {
                uid: id.uid,
                gid: id.gid,
                groups: id.groups,
                user: id.user,
            },
            admin,
        }
    }

    /// Whether the user `uid` is root or an admin (for the socket's admin reserve); a uid
    /// with no user is not.
    pub fn is_admin_uid(&self, uid: u32) -> bool {
        uid == 0 || Identity::of_uid(uid).is_ok_and(|id| self.caller_of(id).admin)
    }

    /// A local caller, by the peer credentials of the Unix socket (`None`: not local).
    fn local<T>(&self, req: &Request<T>) -> Option<Result<Identity>> {
        let Peer::Unix(uds) = &req.extensions().get::<ConnInfo>()?.peer else {
            return None;
        };
        let Some(cred) = uds.peer_cred else {
            return Some(Err(MasterError::Unauthenticated(
                "the socket gave no peer credentials".into(),
            )));
        };
        Some(
            Identity::of_uid(cred.uid())
                .map(|mut id| {
                    // The caller's current primary group (it may have switched with `sg`).
                    id.gid = cred.gid();
                    if !id.groups.contains(&id.gid) {
                        id.groups.push(id.gid);
                    }
                    id
                })
                .map_err(MasterError::Unauthenticated),
        )
    }

    /// The caller of a client request.
    pub fn caller<T>(&self, req: &Request<T>) -> Result<Caller> {
        if let Some(id) = self.local(req) {
            return Ok(self.caller_of(id?));
        }
        match peer(req) {
            Some(PeerName::User(name)) => {
                let id = Identity::of_name(&name).map_err(MasterError::Unauthenticated)?;
                return Ok(self.caller_of(id));
            }
            Some(other) => {
                return Err(MasterError::Unauthenticated(format!(
                    "the client certificate names {other}, not a user"
                )));
            }
            None => {}
        }
        if let Some(token) = bearer(req) {
            let claims = self
                .tokens
                .verify(token, unix_now_s())
                .map_err(|e: TokenError| MasterError::Unauthenticated(e.to_string()))?;
            return Ok(self.caller_of(claims.identity()));
        }
        Err(MasterError::Unauthenticated(
            "no identity: on a cluster host use the master's Unix socket; elsewhere present \
             a user certificate or a token from `gangctl token` (authorization: Bearer)"
                .into(),
        ))
    }

    /// A token for a local caller (tokens are not handed out over the network, where a
    /// token could only be renewed by its bearer forever).
    pub fn issue_token<T>(&self, req: &Request<T>, ttl_s: u64) -> Result<(Caller, String, u64)> {
        let Some(id) = self.local(req) else {
            return Err(MasterError::Unauthenticated(
                "tokens are issued only on the master's Unix socket, to the user its peer \
                 credentials name: run `gangctl token` on a cluster host"
                    .into(),
            ));
        };
        let id = id?;
        let ttl = match ttl_s {
            0 => self.policy.token_ttl_s,
            t => t.min(self.policy.token_max_ttl_s),
        };
        let now = unix_now_s();
        let token = self.tokens.issue(&id, now, ttl);
        Ok((self.caller_of(id), token, now + ttl))
    }
}

fn bearer<T>(req: &Request<T>) -> Option<&str> {
    let v = req.metadata().get("authorization")?.to_str().ok()?;
    v.strip_prefix("Bearer ").map(str::trim)
}

/// The node an agent's certificate names; a request about another node is refused.
pub fn agent_node<T>(req: &Request<T>, claimed: Coord) -> Result<Coord> {
    match peer(req) {
        Some(PeerName::Node { x, y }) if (x, y) == claimed => Ok((x, y)),
        Some(PeerName::Node { x, y }) => Err(MasterError::Forbidden(format!(
            "the certificate of node ({x},{y}) cannot speak for node ({},{})",
            claimed.0, claimed.1
        ))),
        Some(other) => Err(MasterError::Forbidden(format!(
            "only agents may call the registry; the certificate names {other}"
        ))),
        None => Err(MasterError::Unauthenticated(
            "agents must present their node certificate".into(),
        )),
    }
}

/// Any agent (calls that speak for no node in particular: clock probes, output batches).
pub fn any_node<T>(req: &Request<T>) -> Result<Coord> {
    match peer(req) {
        Some(PeerName::Node { x, y }) => Ok((x, y)),
        Some(other) => Err(MasterError::Forbidden(format!(
            "only agents may call the registry; the certificate names {other}"
        ))),
        None => Err(MasterError::Unauthenticated(
            "agents must present their node certificate".into(),
        )),
    }
}
