//! Unix users: who a uid is, and which groups they are in.

use std::ffi::CString;

use nix::unistd::{Gid, Uid, User, getgrouplist};

/// A user as the system knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the primary one included.
    pub groups: Vec<u32>,
    pub user: String,
}

impl Identity {
    /// The user with this uid, from the password database.
    pub fn of_uid(uid: u32) -> Result<Identity, String> {
        Identity::lookup_uid(uid)?.ok_or_else(|| format!("uid {uid} is not a user on this host"))
    }

    /// The user with this uid now, or `None` if there is none (a lookup that fails is an
    /// error, not an absent user: a broken NSS must not read as a deleted account).
    pub fn lookup_uid(uid: u32) -> Result<Option<Identity>, String> {
        User::from_uid(Uid::from_raw(uid))
            .map(|u| u.map(identity))
            .map_err(|e| format!("cannot look up uid {uid}: {e}"))
    }

    /// The user with this name.
    pub fn of_name(name: &str) -> Result<Identity, String> {
        match User::from_name(name) {
            Ok(Some(u)) => Ok(identity(u)),
            Ok(None) => Err(format!("{name:?} is not a user on this host")),
            Err(e) => Err(format!("cannot look up user {name:?}: {e}")),
        }
    }
}

fn identity(u: User) -> Identity {
    let groups = CString::new(u.name.as_str())
        .ok()
        .and_then(|name| getgrouplist(&name, u.gid).ok())
        .map(|gs| gs.into_iter().map(Gid::as_raw).collect())
        .unwrap_or_else(|| vec![u.gid.as_raw()]);
    Identity {
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
        groups,
        user: u.name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_by_uid_and_name() {
        let r = Identity::of_uid(0).unwrap();
        assert_eq!((r.uid, r.gid, r.user.as_str()), (0, 0, "root"));
        assert!(r.groups.contains(&0));
        assert_eq!(Identity::of_name("root").unwrap(), r);
        assert!(
            Identity::of_uid(4_000_000_000)
                .unwrap_err()
                .contains("not a user")
        );
        assert_eq!(Identity::lookup_uid(4_000_000_000), Ok(None));
    }
}
