//! Tokens for remote clients: the master issues one to a user it identified locally (by
//! the peer credentials of its Unix socket), signed with a key only the master holds
//! (HS256), valid for a bounded time. A client sends it as `authorization: Bearer TOKEN`
//! over TLS; the master checks the signature and the expiry, and takes the identity from
//! the token, never from the request.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::users::Identity;

/// What a token says: who, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user name.
    pub sub: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Issued at and expiry, seconds since the Unix epoch.
    pub iat: u64,
    pub exp: u64,
}

impl Claims {
    pub fn identity(&self) -> Identity {
        Identity {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            user: self.sub.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not valid: {0}")]
    Invalid(String),
    #[error("the token expired; get a new one with `gangctl token` on a cluster host")]
    Expired,
    #[error("token key {path}: {source}")]
    Key {
        path: String,
        source: std::io::Error,
    },
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

    /// A token for `who`, valid from `now_s` for `ttl_s` seconds.
    pub fn issue(&self, who: &Identity, now_s: u64, ttl_s: u64) -> String {
        let claims = Claims {
            sub: who.user.clone(),
            uid: who.uid,
            gid: who.gid,
            groups: who.groups.clone(),
            iat: now_s,
            exp: now_s + ttl_s,
        };
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.0),
        )
        .expect("HS256 signing of plain claims cannot fail")
    }

    /// The claims of a token this key signed, if it has not expired at `now_s`.
    pub fn verify(&self, token: &str, now_s: u64) -> Result<Claims, TokenError> {
        let mut v = Validation::new(Algorithm::HS256);
        // Expiry is checked below against the caller's clock, exactly.
        v.validate_exp = false;
        v.required_spec_claims = ["exp", "sub"].iter().map(|s| s.to_string()).collect();
        let data = jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&self.0), &v)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        if data.claims.exp <= now_s {
            return Err(TokenError::Expired);
        }
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Identity {
        Identity {
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 27],
            user: "alice".into(),
        }
    }

    #[test]
    fn tokens_carry_the_identity_until_they_expire() {
        let k = TokenKey::from_bytes(&[7; 32]);
        let t = k.issue(&alice(), 1_000, 60);
        assert_eq!(k.verify(&t, 1_059).unwrap().identity(), alice());
        assert!(matches!(k.verify(&t, 1_060), Err(TokenError::Expired)));
        // Another master's key, or a token changed by its bearer, is refused.
        let other = TokenKey::from_bytes(&[8; 32]);
        assert!(matches!(
            other.verify(&t, 1_000),
            Err(TokenError::Invalid(_))
        ));
        let (head, rest) = t.split_once('.').unwrap();
        let (_, sig) = rest.split_once('.').unwrap();
        let forged_claims = k.issue(&Identity { uid: 0, ..alice() }, 1_000, 60);
        let body = forged_claims.split('.').nth(1).unwrap();
        let forged = format!("{head}.{body}.{sig}");
        assert!(matches!(
            k.verify(&forged, 1_000),
            Err(TokenError::Invalid(_))
        ));
        assert!(matches!(
            k.verify("nonsense", 1_000),
            Err(TokenError::Invalid(_))
        ));
    }

    #[test]
    fn the_key_is_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token.key");
        let a = TokenKey::load_or_create(&p).unwrap();
        let t = a.issue(&alice(), 10, 10);
        let b = TokenKey::load_or_create(&p).unwrap();
        assert!(b.verify(&t, 11).is_ok(), "the same key after a restart");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
