//! Revoked tokens (`gangctl token revoke`): single tokens by id, and all of a user's tokens
//! issued up to an instant. Checked at every use of a token, from memory; kept in a small
//! JSON file beside the token key (`token.key.revoked`, mode 0600) so that a restart does
//! not bring a revoked token back.
//!
//! An entry is dropped once every token it covers has expired: a token it covers was
//! issued no later than the revocation, and no token is accepted whose lifetime exceeds
//! the current `token_max_ttl_s` (`TokenKey::verify`), so revocation time + that limit is
//! past the end of all of them, whatever the limit was when they were issued.

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use gang_auth::token::{Claims, TokenError};
use serde::{Deserialize, Serialize};

/// What to revoke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// The token with this id.
    Token(String),
    /// Every token of this user issued up to the revocation.
    User(String),
}

/// The list as it is on disk: when each entry was made, in ms since the Unix epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Revoked {
    /// Token ids, each with when it was revoked.
    #[serde(default)]
    tokens: BTreeMap<String, u64>,
    /// User names: every token of theirs issued at or before this instant is revoked.
    #[serde(default)]
    users: BTreeMap<String, u64>,
}

impl Revoked {
    fn check(&self, c: &Claims) -> Result<(), TokenError> {
        if self.tokens.contains_key(&c.jti) {
            return Err(TokenError::Revoked(format!("token {}", c.jti)));
        }
        // At or before: a token issued in the very millisecond of the revocation may have
        // been issued before it; refusing it costs its user one more `gangctl token`.
        match self.users.get(&c.sub) {
            Some(&until_ms) if c.iat_ms <= until_ms => Err(TokenError::Revoked(format!(
                "with every token of {} issued until the revocation",
                c.sub
            ))),
            _ => Ok(()),
        }
    }

    fn add(&mut self, what: &Revocation, now_ms: u64) {
        match what {
            // The first revocation time is kept: the token was issued before it.
            Revocation::Token(id) => {
                self.tokens.entry(id.clone()).or_insert(now_ms);
            }
            Revocation::User(user) => {
                let until = self.users.entry(user.clone()).or_insert(now_ms);
                *until = (*until).max(now_ms);
            }
        }
    }

    /// Drop the entries whose tokens have all expired (see the module comment).
    fn prune(&mut self, now_ms: u64, max_lifetime_s: u64) {
        let live = |at: &u64| at.saturating_add(max_lifetime_s.saturating_mul(1000)) >= now_ms;
        self.tokens.retain(|_, at| live(at));
        self.users.retain(|_, at| live(at));
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RevocationsError {
    #[error(
        "token revocations {path}: {problem} (it lists revoked tokens; moving it away \
         would make them valid again until they expire)"
    )]
    Load { path: String, problem: String },
    #[error(
        "token revocations {path}: cannot save: {problem}; revoked until the master stops, \
         not after a restart"
    )]
    Save { path: String, problem: String },
}

pub struct Revocations {
    path: PathBuf,
    /// Read at every use of a token; replaced only after the file is written.
    list: RwLock<Revoked>,
    /// One writer at a time: each writes the whole list.
    writer: Mutex<()>,
}

impl Revocations {
    /// Where the revocations of tokens signed with the key at `token_key` are kept.
    pub fn path_beside(token_key: &Path) -> PathBuf {
        let mut name = token_key.file_name().unwrap_or_default().to_os_string();
        name.push(".revoked");
        token_key.with_file_name(name)
    }

    /// The list at `path` (none yet: empty), pruned. A file that cannot be read is an
    /// error: starting without it would silently bring revoked tokens back.
    pub fn load(
        path: &Path,
        now_ms: u64,
        max_lifetime_s: u64,
    ) -> Result<Revocations, RevocationsError> {
        let err = |problem: String| RevocationsError::Load {
            path: path.display().to_string(),
            problem,
        };
        let mut list = match fs::read(path) {
            Ok(bytes) => serde_json::from_slice::<Revoked>(&bytes)
                .map_err(|e| err(format!("not a revocation list: {e}")))?,
            Err(e) if e.kind() == ErrorKind::NotFound => Revoked::default(),
            Err(e) => return Err(err(e.to_string())),
        };
        list.prune(now_ms, max_lifetime_s);
        Ok(Revocations {
            path: path.to_path_buf(),
            list: RwLock::new(list),
            writer: Mutex::new(()),
        })
    }

    /// Refused if the token is revoked.
    pub fn check(&self, c: &Claims) -> Result<(), TokenError> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).check(c)
    }

    /// Revoke: at once in memory, then on disk. Blocking (it writes and syncs a file).
    /// If the file cannot be written the revocation still holds until the master stops
    /// (refusing the token is the safe side), the error says so, and the next revocation
    /// saved writes it too.
    pub fn revoke(
        &self,
        what: &Revocation,
        now_ms: u64,
        max_lifetime_s: u64,
    ) -> Result<(), RevocationsError> {
        let _turn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let next = {
            let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
            list.add(what, now_ms);
            list.prune(now_ms, max_lifetime_s);
            list.clone()
        };
        // Written outside the read-write lock: token checks do not wait for the disk.
        write_atomically(&self.path, &next).map_err(|e| RevocationsError::Save {
            path: self.path.display().to_string(),
            problem: e.to_string(),
        })
    }
}

/// Write `list` to `path` so that a crash leaves the old file or the new one, never a
/// part: a private temporary file, synced, renamed over it, and the directory synced.
fn write_atomically(path: &Path, list: &Revoked) -> std::io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // A temporary file left by a crash keeps its mode; make sure it is private.
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    f.write_all(&serde_json::to_vec_pretty(list).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_auth::token::TokenKey;

    const HOUR: u64 = 3600;
    const T0: u64 = 1_700_000_000_000;

    fn claims(k: &TokenKey, user: &str, at_ms: u64) -> Claims {
        k.issue(user, 1000, at_ms, HOUR).unwrap().claims
    }

    #[test]
    fn revocations_by_id_and_by_user_hold_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = Revocations::path_beside(&dir.path().join("token.key"));
        assert_eq!(path, dir.path().join("token.key.revoked"));
        let k = TokenKey::from_bytes(&[7; 32]);
        let (one, other) = (claims(&k, "alice", T0), claims(&k, "alice", T0));
        let bobs = claims(&k, "bob", T0);
        let r = Revocations::load(&path, T0, HOUR).unwrap();
        assert!(r.check(&one).is_ok());

        r.revoke(&Revocation::Token(one.jti.clone()), T0 + 10, HOUR)
            .unwrap();
        let e = r.check(&one).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the token was revoked (token {}); get a new one with `gangctl token` on a \
                 cluster host",
                one.jti
            )
        );
        assert!(r.check(&other).is_ok(), "only that token");

        r.revoke(&Revocation::User("alice".into()), T0 + 20, HOUR)
            .unwrap();
        assert!(r.check(&other).is_err());
        assert!(r.check(&claims(&k, "alice", T0 + 20)).is_err(), "same ms");
        assert!(
            r.check(&claims(&k, "alice", T0 + 21)).is_ok(),
            "issued after"
        );
        assert!(r.check(&bobs).is_ok(), "another user's");

        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Revocations::load(&path, T0 + 30, HOUR).unwrap();
        assert!(again.check(&one).is_err() && again.check(&other).is_err());
        assert!(again.check(&bobs).is_ok());
        assert!(!dir.path().join("token.key.revoked.tmp").exists());
    }

    #[test]
    fn entries_go_once_every_token_they_cover_has_expired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.key.revoked");
        let r = Revocations::load(&path, T0, HOUR).unwrap();
        r.revoke(&Revocation::Token("aa".into()), T0, HOUR).unwrap();
        r.revoke(&Revocation::User("alice".into()), T0 + 5_000, HOUR)
            .unwrap();
        let on_disk =
            |p: &Path| -> Revoked { serde_json::from_slice(&fs::read(p).unwrap()).unwrap() };
        // The id's tokens may live until T0 + 1 h: kept until then, gone after.
        let kept = Revocations::load(&path, T0 + HOUR * 1000, HOUR).unwrap();
        assert_eq!(kept.list.read().unwrap().tokens.len(), 1);
        let later = Revocations::load(&path, T0 + HOUR * 1000 + 1, HOUR).unwrap();
        let list = later.list.read().unwrap().clone();
        assert!(list.tokens.is_empty(), "{list:?}");
        assert_eq!(list.users.get("alice"), Some(&(T0 + 5_000)));
        // Pruned on disk at the next write.
        later
            .revoke(&Revocation::User("bob".into()), T0 + HOUR * 1000 + 2, HOUR)
            .unwrap();
        assert!(on_disk(&path).tokens.is_empty());
        assert_eq!(on_disk(&path).users.len(), 2);
    }

    #[test]
    fn an_unreadable_list_stops_the_master() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.key.revoked");
        fs::write(&path, b"{\"tokens\": [").unwrap();
        let e = Revocations::load(&path, T0, HOUR).err().expect("refused");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "token revocations {}: not a revocation list: ",
                path.display()
            )),
            "{msg}"
        );
        assert!(
            msg.ends_with("would make them valid again until they expire)"),
            "{msg}"
        );
    }

    #[test]
    fn a_revocation_not_saved_holds_until_the_master_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("token.key.revoked");
        let k = TokenKey::from_bytes(&[7; 32]);
        let c = claims(&k, "alice", T0);
        let r = Revocations::load(&path, T0, HOUR).unwrap();
        let e = r
            .revoke(&Revocation::Token(c.jti.clone()), T0, HOUR)
            .unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "token revocations {}: cannot save: ",
                path.display()
            )) && e
                .to_string()
                .ends_with("; revoked until the master stops, not after a restart"),
            "{e}"
        );
        assert!(r.check(&c).is_err(), "refused all the same");
    }
}
