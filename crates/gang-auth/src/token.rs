//! Tokens for remote clients: the master issues one to a user it identified locally (by
//! the peer credentials of its Unix socket), signed with a key only the master holds
//! (HS256), valid for a bounded time. A client sends it as `authorization: Bearer TOKEN`
//! over TLS; the master checks the signature and the expiry, and takes the identity from
//! the token, never from the request.
//!
//! A token names its user (name and uid) and nothing else about them: groups and the
//! primary gid are looked up in the account database at every use
//! ([`Claims::current_identity`]), so a group removed or a user deleted after the token
//! was issued takes effect at once. Each token has a random id (`jti`) and an issue time
//! in milliseconds (`iat_ms`), by which the master revokes one token or all of a user's
//! issued before an instant.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::users::Identity;

/// What a token says: who (by name and uid), which token, and when.
///
/// Tokens of earlier masters also carried `gid` and `groups`: they still verify (unknown
/// fields are ignored), but what they said about groups is ignored too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user name.
    pub sub: String,
    pub uid: u32,
    /// The token's id: 128 random bits, hex. Tokens of earlier masters had none; theirs
    /// is made from a hash of the token (see [`TokenKey::decode`]).
    #[serde(default)]
    pub jti: String,
    /// Issued at, seconds since the Unix epoch (the JWT claim).
    pub iat: u64,
    /// Issued at, milliseconds: revoking a user's tokens "issued before now" must not
    /// catch a token issued a moment after, in the same second.
    #[serde(default)]
    pub iat_ms: u64,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
}

impl Claims {
    /// How long the token was issued for.
    pub fn lifetime_s(&self) -> u64 {
        self.exp.saturating_sub(self.iat)
    }

    /// The token's user as the account database (`lookup`, by uid) has them now: their
    /// groups and primary gid are today's, not the issue time's. Refused if the uid is
    /// no user any more, or another user's (a uid given to a new account).
    pub fn current_identity(
        &self,
        lookup: impl FnOnce(u32) -> Result<Option<Identity>, String>,
    ) -> Result<Identity, TokenError> {
        let gone = |now: Option<String>| TokenError::UserGone {
            user: self.sub.clone(),
            uid: self.uid,
            now,
        };
        match lookup(self.uid).map_err(TokenError::Lookup)? {
            None => Err(gone(None)),
            Some(id) if id.user != self.sub => Err(gone(Some(id.user))),
            Some(id) => Ok(id),
        }
    }
}

/// A token just issued, and what it says.
#[derive(Debug, Clone)]
pub struct Issued {
    pub token: String,
    pub claims: Claims,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not valid: {0}")]
    Invalid(String),
    #[error("the token expired; get a new one with `gangctl token` on a cluster host")]
    Expired,
    #[error(
        "the token was issued for {lifetime_s} s, longer than this master now allows \
         (token_max_ttl_s = {max_s}); get a new one with `gangctl token` on a cluster host"
    )]
    TooLong { lifetime_s: u64, max_s: u64 },
    #[error(
        "the token's user {user} (uid {uid}) no longer exists on this host{}",
        now_whose(.now, *.uid)
    )]
    UserGone {
        user: String,
        uid: u32,
        /// The user the uid belongs to now, if it was given to another account.
        now: Option<String>,
    },
    #[error("cannot check the token's user: {0}")]
    Lookup(String),
    #[error("the token was revoked ({0}); get a new one with `gangctl token` on a cluster host")]
    Revoked(String),
    #[error("no system randomness for a token id")]
    NoRandomness,
    #[error("token key {path}: {source}")]
    Key {
        path: String,
        source: std::io::Error,
    },
}

/// Whose a uid is now, if another account has it.
fn now_whose(now: &Option<String>, uid: u32) -> String {
    now.as_ref()
        .map(|n| format!(": uid {uid} is now {n}'s"))
        .unwrap_or_default()
}

/// Lower-case hex, as token ids are written.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The master's signing key.
pub struct TokenKey(Vec<u8>);

const KEY_BYTES: usize = 32;

impl TokenKey {
    /// The key at `path`, made (random, mode 0600) if there is none yet, so tokens stay
    /// valid across master restarts.
    pub fn load_or_create(path: &Path) -> Result<TokenKey, TokenError> {
        let err = |source| TokenError::Key {
            path: path.display().to_string(),
            source,
        };
        match fs::read(path) {
            Ok(k) if k.len() >= KEY_BYTES => return Ok(TokenKey(k)),
            Ok(_) => {
                return Err(err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("shorter than {KEY_BYTES} bytes"),
                )));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let mut key = vec![0u8; KEY_BYTES];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| err(std::io::Error::other("no system randomness")))?;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        f.write_all(&key).map_err(err)?;
        f.sync_all().map_err(err)?;
        Ok(TokenKey(key))
    }

    /// A key held in memory only (tests).
    pub fn from_bytes(k: &[u8]) -> TokenKey {
        TokenKey(k.to_vec())
    }

    /// A token for `user` (uid `uid`), issued at `now_ms` (milliseconds since the Unix
    /// epoch), valid for `ttl_s` seconds.
    pub fn issue(
        &self,
        user: &str,
        uid: u32,
        now_ms: u64,
        ttl_s: u64,
    ) -> Result<Issued, TokenError> {
        let mut id = [0u8; 16];
        SystemRandom::new()
            .fill(&mut id)
            .map_err(|_| TokenError::NoRandomness)?;
        let iat = now_ms / 1000;
        let claims = Claims {
            sub: user.to_string(),
            uid,
            jti: hex(&id),
            iat,
            iat_ms: now_ms,
            exp: iat + ttl_s,
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.0),
        )
        .expect("HS256 signing of plain claims cannot fail");
        Ok(Issued { token, claims })
    }

    /// The claims of a token this key signed, expired or not (to revoke a token, its
    /// signature is all that matters). A token of an earlier master, without an id or a
    /// millisecond issue time, gets an id from the first 128 bits of the SHA-256 of the
    /// token (stable, so it can be revoked) and its issue second as `iat_ms`.
    pub fn decode(&self, token: &str) -> Result<Claims, TokenError> {
        let mut v = Validation::new(Algorithm::HS256);
        // Expiry is checked by `verify`, against the caller's clock, exactly.
        v.validate_exp = false;
        v.required_spec_claims = ["exp", "sub"].iter().map(|s| s.to_string()).collect();
        let mut claims =
            jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&self.0), &v)
                .map_err(|e| TokenError::Invalid(e.to_string()))?
                .claims;
        if claims.jti.is_empty() {
            let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
            claims.jti = hex(&digest.as_ref()[..16]);
        }
        if claims.iat_ms == 0 {
            claims.iat_ms = claims.iat.saturating_mul(1000);
        }
        Ok(claims)
    }

    /// The claims of a token this key signed, if it has not expired at `now_ms` and was
    /// issued for at most `max_lifetime_s`: lowering the master's `token_max_ttl_s` cuts
    /// off longer tokens issued before, and keeps every accepted token within the bound
    /// revocations are kept for.
    pub fn verify(
        &self,
        token: &str,
        now_ms: u64,
        max_lifetime_s: u64,
    ) -> Result<Claims, TokenError> {
        let claims = self.decode(token)?;
        if claims.exp.saturating_mul(1000) <= now_ms {
            return Err(TokenError::Expired);
        }
        if claims.lifetime_s() > max_lifetime_s {
            return Err(TokenError::TooLong {
                lifetime_s: claims.lifetime_s(),
                max_s: max_lifetime_s,
            });
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;

    fn alice() -> Identity {
        Identity {
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 27],
            user: "alice".into(),
        }
    }

    #[test]
    fn tokens_name_the_user_until_they_expire() {
        let k = TokenKey::from_bytes(&[7; 32]);
        let t = k.issue("alice", 1000, 1_000_500, 60).unwrap();
        let c = k.verify(&t.token, 1_059_999, DAY).unwrap();
        assert_eq!(c, t.claims);
        assert_eq!((c.sub.as_str(), c.uid), ("alice", 1000));
        assert_eq!((c.iat, c.iat_ms, c.exp), (1_000, 1_000_500, 1_060));
        assert_eq!(c.jti.len(), 32, "128 bits, hex: {}", c.jti);
        assert!(c.jti.bytes().all(|b| b.is_ascii_hexdigit()), "{}", c.jti);
        assert!(matches!(
            k.verify(&t.token, 1_060_000, DAY),
            Err(TokenError::Expired)
        ));
        // Every token its own id.
        let again = k.issue("alice", 1000, 1_000_500, 60).unwrap();
        assert_ne!(again.claims.jti, c.jti);
    }

    #[test]
    fn tokens_carry_no_groups() {
        #[derive(Deserialize)]
        struct Raw {
            gid: Option<u32>,
            groups: Option<Vec<u32>>,
        }
        let k = TokenKey::from_bytes(&[7; 32]);
        let t = k.issue("alice", 1000, 1_000_000, 60).unwrap();
        let mut v = Validation::new(Algorithm::HS256);
        v.validate_exp = false;
        let raw = jsonwebtoken::decode::<Raw>(&t.token, &DecodingKey::from_secret(&[7; 32]), &v)
            .unwrap()
            .claims;
        assert_eq!((raw.gid, raw.groups), (None, None));
    }

    #[test]
    fn forged_or_foreign_tokens_are_refused() {
        let k = TokenKey::from_bytes(&[7; 32]);
        let t = k.issue("alice", 1000, 1_000_000, 60).unwrap().token;
        // Another master's key, or a token changed by its bearer, is refused.
        let other = TokenKey::from_bytes(&[8; 32]);
        assert!(matches!(
            other.verify(&t, 1_000_000, DAY),
            Err(TokenError::Invalid(_))
        ));
        let (head, rest) = t.split_once('.').unwrap();
        let (_, sig) = rest.split_once('.').unwrap();
        let root = k.issue("root", 0, 1_000_000, 60).unwrap().token;
        let body = root.split('.').nth(1).unwrap();
        let forged = format!("{head}.{body}.{sig}");
        assert!(matches!(
            k.verify(&forged, 1_000_000, DAY),
            Err(TokenError::Invalid(_))
        ));
        assert!(matches!(
            k.verify("nonsense", 1_000_000, DAY),
            Err(TokenError::Invalid(_))
        ));
    }

    #[test]
    fn tokens_longer_than_the_limit_now_are_refused() {
        let k = TokenKey::from_bytes(&[7; 32]);
        let week = k.issue("alice", 1000, 1_000_000, 7 * DAY).unwrap().token;
        assert!(k.verify(&week, 1_000_000, 7 * DAY).is_ok());
        let e = k.verify(&week, 1_000_000, DAY).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the token was issued for 604800 s, longer than this master now allows \
             (token_max_ttl_s = 86400); get a new one with `gangctl token` on a cluster host"
        );
    }

    /// A token of the master before this one: groups and gid in it, no id, issue time in
    /// seconds. It still names its user; its groups are not read; it gets a stable id.
    #[test]
    fn tokens_of_earlier_masters_verify_without_their_groups() {
        #[derive(Serialize)]
        struct Old {
            sub: String,
            uid: u32,
            gid: u32,
            groups: Vec<u32>,
            iat: u64,
            exp: u64,
        }
        let key = [7; 32];
        let old = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &Old {
                sub: "alice".into(),
                uid: 1000,
                gid: 6,
                groups: vec![6, 1000],
                iat: 1_000,
                exp: 2_000,
            },
            &EncodingKey::from_secret(&key),
        )
        .unwrap();
        let k = TokenKey::from_bytes(&key);
        let c = k.verify(&old, 1_500_000, DAY).unwrap();
        assert_eq!(
            (c.sub.as_str(), c.uid, c.iat_ms),
            ("alice", 1000, 1_000_000)
        );
        assert_eq!(c.jti.len(), 32);
        assert_eq!(k.decode(&old).unwrap().jti, c.jti, "the same id every time");
        let id = c.current_identity(|_| Ok(Some(alice()))).unwrap();
        assert_eq!(id.groups, alice().groups, "today's groups, not the token's");
    }

    #[test]
    fn the_user_is_looked_up_at_every_use() {
        let k = TokenKey::from_bytes(&[7; 32]);
        let t = k.issue("alice", 1000, 1_000_000, 60).unwrap();
        let c = k.verify(&t.token, 1_000_000, DAY).unwrap();
        // Groups are today's.
        let now = Identity {
            groups: vec![1000],
            ..alice()
        };
        assert_eq!(c.current_identity(|_| Ok(Some(now.clone()))).unwrap(), now);
        // Deleted, or the uid given to someone else, or no answer: refused.
        assert_eq!(
            c.current_identity(|_| Ok(None)).unwrap_err().to_string(),
            "the token's user alice (uid 1000) no longer exists on this host"
        );
        let bob = Identity {
            user: "bob".into(),
            ..alice()
        };
        assert_eq!(
            c.current_identity(|_| Ok(Some(bob)))
                .unwrap_err()
                .to_string(),
            "the token's user alice (uid 1000) no longer exists on this host: uid 1000 is \
             now bob's"
        );
        assert!(matches!(
            c.current_identity(|_| Err("NSS is down".into())),
            Err(TokenError::Lookup(_))
        ));
    }

    #[test]
    fn the_key_is_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token.key");
        let a = TokenKey::load_or_create(&p).unwrap();
        let t = a.issue("alice", 1000, 10_000, 10).unwrap().token;
        let b = TokenKey::load_or_create(&p).unwrap();
        assert!(
            b.verify(&t, 11_000, DAY).is_ok(),
            "the same key after a restart"
        );
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
