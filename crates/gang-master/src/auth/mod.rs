//! Who is calling, from the connection and never from the request: the peer credentials of
//! the Unix socket (local clients), a user certificate or a token (remote clients over
//! TLS), or a node certificate (agents, on their own port).
//!
//! A token names a user only; at every use it must be signed by this master, unexpired,
//! not longer-lived than `token_max_ttl_s`, not revoked (`revocations.rs`), and its user
//! must still exist with that uid: groups and primary gid are looked up then.

pub mod revocations;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gang_auth::names::{PeerName, valid_user};
use gang_auth::peer::peer_name;
use gang_auth::token::{Issued, TokenError, TokenKey};
use gang_auth::users::Identity;
use tonic::Request;
use tonic::transport::server::TlsConnectInfo;
use tracing::info;

use crate::auth::revocations::{Revocation, Revocations};
use crate::config::AuthPolicy;
use crate::connections::{ConnInfo, Peer};
use crate::error::{MasterError, Result};
use crate::state::events::{Caller, Owner};
use crate::state::views::Coord;

pub struct Authenticator {
    policy: AuthPolicy,
    tokens: TokenKey,
    revoked: Revocations,
}

pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a caller asks to revoke (`AuthService.RevokeTokens`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeTarget {
    /// A whole token: whoever holds it may revoke it.
    Token(String),
    /// A token's id: admins only.
    Id(String),
    /// A user's tokens: the user or an admin.
    User(String),
}

/// A revocation the caller may make, and what to tell them about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub revocation: Revocation,
    /// The token's id, when one token is revoked.
    pub id: String,
    /// Whose tokens, when known (not by id: the master keeps no list of issued tokens).
    pub user: String,
    /// Revoked at (a user's tokens: those issued up to then), ms since the Unix epoch.
    pub at_ms: u64,
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
    pub fn new(policy: AuthPolicy, tokens: TokenKey, revoked: Revocations) -> Self {
        Authenticator {
            policy,
            tokens,
            revoked,
        }
    }

    /// The signing key at `key` (made on first start) and the revocations beside it.
    pub fn open(policy: AuthPolicy, key: &Path) -> anyhow::Result<Self> {
        let tokens = TokenKey::load_or_create(key)?;
        let path = Revocations::path_beside(key);
        let revoked = Revocations::load(&path, unix_now_ms(), policy.token_max_ttl_s)?;
        Ok(Authenticator::new(policy, tokens, revoked))
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
            let id = self
                .token_user(token)
                .map_err(|e| MasterError::Unauthenticated(e.to_string()))?;
            return Ok(self.caller_of(id));
        }
        Err(MasterError::Unauthenticated(
            "no identity: on a cluster host use the master's Unix socket; elsewhere present \
             a user certificate or a token from `gangctl token` (authorization: Bearer)"
                .into(),
        ))
    }

    /// The user a token names, as they are now (see the module comment).
    fn token_user(&self, token: &str) -> Result<Identity, TokenError> {
        let claims = self
            .tokens
            .verify(token, unix_now_ms(), self.policy.token_max_ttl_s)?;
        self.revoked.check(&claims)?;
        claims.current_identity(Identity::lookup_uid)
    }

    /// A token for a local caller (tokens are not handed out over the network, where a
    /// token could only be renewed by its bearer forever). Its id, user and expiry go to
    /// the log: the id is how an admin revokes one token of a user.
    pub fn issue_token<T>(&self, req: &Request<T>, ttl_s: u64) -> Result<(Caller, Issued)> {
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
        let issued = self
            .tokens
            .issue(&id.user, id.uid, unix_now_ms(), ttl)
            .map_err(|e| MasterError::Internal(e.to_string()))?;
        let c = &issued.claims;
        info!(id = %c.jti, user = %c.sub, uid = c.uid, ttl_s = ttl, expires_s = c.exp, "token issued");
        Ok((self.caller_of(id), issued))
    }

    /// Whether `caller` may revoke `what`: a token by whoever holds it (holding it, they
    /// could use it; revoking takes nothing from anyone else), by id for admins only, a
    /// user's tokens by that user or an admin.
    pub fn may_revoke(&self, caller: &Caller, what: RevokeTarget) -> Result<Granted> {
        let at_ms = unix_now_ms();
        let me = &caller.owner.user;
        match what {
            RevokeTarget::Token(t) => {
                let c = self.tokens.decode(t.trim()).map_err(|e| {
                    MasterError::Invalid(format!("cannot revoke the token given: {e}"))
                })?;
                Ok(Granted {
                    revocation: Revocation::Token(c.jti.clone()),
                    id: c.jti,
                    user: c.sub,
                    at_ms,
                })
            }
            RevokeTarget::Id(id) => {
                if !caller.admin {
                    return Err(MasterError::AdminOnly {
                        caller: me.clone(),
                        action: "revoke a token by its id",
                    });
                }
                let id = id.trim().to_ascii_lowercase();
                if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(MasterError::Invalid(format!(
                        "{id:?} is not a token id (32 hex digits, as the master logs at issue)"
                    )));
                }
                Ok(Granted {
                    revocation: Revocation::Token(id.clone()),
                    id,
                    user: String::new(),
                    at_ms,
                })
            }
            RevokeTarget::User(user) => {
                if !valid_user(&user) {
                    return Err(MasterError::Invalid(format!(
                        "{user:?} is not a valid user name"
                    )));
                }
                if user != *me && !caller.admin {
                    return Err(MasterError::Forbidden(format!(
                        "{me} may not revoke the tokens of {user}: only {user} or an admin may"
                    )));
                }
                Ok(Granted {
                    revocation: Revocation::User(user.clone()),
                    id: String::new(),
                    user,
                    at_ms,
                })
            }
        }
    }

    /// Make a revocation `may_revoke` granted. Blocking: it writes a file.
    pub fn revoke(&self, g: &Granted) -> Result<()> {
        self.revoked
            .revoke(&g.revocation, g.at_ms, self.policy.token_max_ttl_s)
            .map_err(|e| MasterError::NotSaved(e.to_string()))
    }
}

fn bearer<T>(req: &Request<T>) -> Option<&str> {
    let v = req.metadata().get("authorization")?.to_str().ok()?;
    v.strip_prefix("Bearer ").map(str::trim)
}

/// A node certificate called on the agent port: its connection is vetted (it no longer
/// counts among the unvetted ones a newcomer may close). Refused when the vetted ones are
/// at their bound, or it was closed for a newcomer meanwhile.
fn vet<T>(req: &Request<T>) -> Result<()> {
    let Some(info) = req.extensions().get::<TlsConnectInfo<ConnInfo>>() else {
        return Ok(());
    };
    let info = info.get_ref();
    let (Some(vetting), Peer::Tcp(tcp)) = (&info.vetting, &info.peer) else {
        return Ok(());
    };
    let Some(remote) = tcp.remote_addr() else {
        return Ok(());
    };
    if vetting.vet(remote) {
        return Ok(());
    }
    Err(MasterError::Unavailable(format!(
        "this master holds {} agent connections already (max_agent_connections); try again",
        vetting.limits().vetted
    )))
}

/// The node an agent's certificate names; a request about another node is refused.
pub fn agent_node<T>(req: &Request<T>, claimed: Coord) -> Result<Coord> {
    match peer(req) {
        Some(PeerName::Node { x, y }) if (x, y) == claimed => vet(req).map(|()| (x, y)),
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
        Some(PeerName::Node { x, y }) => vet(req).map(|()| (x, y)),
        Some(other) => Err(MasterError::Forbidden(format!(
            "only agents may call the registry; the certificate names {other}"
        ))),
        None => Err(MasterError::Unauthenticated(
            "agents must present their node certificate".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(user: &str, admin: bool) -> Caller {
        Caller {
            owner: Owner {
                uid: 1000,
                gid: 1000,
                groups: vec![1000],
                user: user.into(),
            },
            admin,
        }
    }

    fn authenticator(dir: &Path) -> Authenticator {
        let policy = AuthPolicy {
            token_ttl_s: 3600,
            token_max_ttl_s: 86_400,
            ..AuthPolicy::default()
        };
        let revoked = Revocations::load(&dir.join("revoked"), 0, 86_400).unwrap();
        Authenticator::new(policy, TokenKey::from_bytes(&[7; 32]), revoked)
    }

    #[test]
    fn who_may_revoke_what() {
        let dir = tempfile::tempdir().unwrap();
        let auth = authenticator(dir.path());
        let (alice, bob, admin) = (
            caller("alice", false),
            caller("bob", false),
            caller("root", true),
        );
        let t = auth.tokens.issue("alice", 1000, unix_now_ms(), 60).unwrap();
        let id = t.claims.jti.clone();

        // A token: whoever holds it, even another user.
        let g = auth
            .may_revoke(&bob, RevokeTarget::Token(t.token.clone()))
            .unwrap();
        assert_eq!((g.id.as_str(), g.user.as_str()), (id.as_str(), "alice"));
        assert_eq!(g.revocation, Revocation::Token(id.clone()));
        let e = auth
            .may_revoke(&bob, RevokeTarget::Token("a.b.c".into()))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot revoke the token given: the token is not valid: "),
            "{e}"
        );

        // By id: admins only, and only what looks like an id.
        let e = auth
            .may_revoke(&alice, RevokeTarget::Id(id.clone()))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "alice may not revoke a token by its id: admins only (`admins` and \
             `admin_groups` in the master's config)"
        );
        let upper = id.to_ascii_uppercase();
        let g = auth.may_revoke(&admin, RevokeTarget::Id(upper)).unwrap();
        assert_eq!(g.revocation, Revocation::Token(id.clone()));
        let e = auth
            .may_revoke(&admin, RevokeTarget::Id("12ab".into()))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"12ab\" is not a token id (32 hex digits, as the master logs at issue)"
        );

        // By user: that user or an admin.
        let e = auth
            .may_revoke(&bob, RevokeTarget::User("alice".into()))
            .unwrap_err();
        assert!(matches!(e, MasterError::Forbidden(_)));
        assert_eq!(
            e.to_string(),
            "bob may not revoke the tokens of alice: only alice or an admin may"
        );
        for who in [&alice, &admin] {
            let g = auth
                .may_revoke(who, RevokeTarget::User("alice".into()))
                .unwrap();
            assert_eq!(g.revocation, Revocation::User("alice".into()));
        }
        let e = auth
            .may_revoke(&admin, RevokeTarget::User("../x".into()))
            .unwrap_err();
        assert_eq!(e.to_string(), "\"../x\" is not a valid user name");

        // Granted and made: the token is refused from then on (root's: a user who exists
        // on every host, or the account check would refuse it first).
        let root = auth.tokens.issue("root", 0, unix_now_ms(), 60).unwrap();
        assert_eq!(auth.token_user(&root.token).unwrap().uid, 0);
        auth.revoke(
            &auth
                .may_revoke(&admin, RevokeTarget::User("root".into()))
                .unwrap(),
        )
        .unwrap();
        assert!(matches!(
            auth.token_user(&root.token),
            Err(TokenError::Revoked(_))
        ));
    }
}
