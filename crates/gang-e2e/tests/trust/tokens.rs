//! Tokens against what changed after they were issued, through the real binaries on the
//! master's TLS port: a group taken away, the user deleted (and their uid given to someone
//! else), and tokens revoked by their bearer, by id and by user, also after a restart.

use std::fs::File;
use std::process::Stdio;

use super::*;

/// `gangctl` or `prun` from "another host": as root, whose local uid counts for nothing
/// over TLS, with an empty HOME (no saved token or client config picked up by accident),
/// the cluster CA and a token.
struct Remote {
    url: String,
    ca: PathBuf,
    home: tempfile::TempDir,
}

impl Remote {
    fn new(c: &LocalCluster) -> Remote {
        Remote {
            url: c.master_tls_addr().expect("the TLS port"),
            ca: c.ca(),
            home: tempfile::tempdir().expect("a temporary HOME"),
        }
    }

    fn command(&self, bin: &str, token: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin_dir().join(bin));
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home.path())
            .env("GANG_MASTER", &self.url)
            .env("GANG_CA", &self.ca)
            .env("GANG_TOKEN", token)
            .args(args);
        cmd
    }

    fn run(&self, bin: &str, token: &str, args: &[&str]) -> Output {
        output_within(&mut self.command(bin, token, args), LIMIT)
    }

    /// Whether the master takes `token` (a plain `gangctl jobs`).
    fn accepted(&self, token: &str) -> bool {
        self.run("gangctl", token, &["jobs"]).status.success()
    }
}

/// `gangctl token` as `u`, on the master's socket.
fn token_of(c: &LocalCluster, u: &TestUser) -> String {
    let out = as_user(c, u, "gangctl", &["token"]);
    assert!(out.status.success(), "{}: {}", u.name, stderr(&out));
    stdout(&out).trim().to_string()
}

fn refused(out: &Output, bin: &str, want: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert_eq!(stderr(out), format!("{bin}: {want}\n"));
}

/// A cluster whose master logs JSON (its "token issued" lines are read by field) and
/// whose socket other users may reach.
fn cluster(sockets: &tempfile::TempDir) -> LocalCluster {
    cluster_with(1, 1, |o| {
        o.socket = Some(sockets.path().join("master.sock"));
        o.master_args
            .extend(["--log-format".to_string(), "json".to_string()]);
    })
}

/// The security review's case: a user removed from a group (`disk`) still ran a job with
/// that group, because the token kept the groups of its issue time. The rank's `id -G`
/// must show the groups the user has when the job is submitted.
#[test]
fn a_token_runs_jobs_with_the_groups_its_user_has_now() {
    if !root() {
        return;
    }
    let mut accounts = Accounts::new();
    let disk = accounts.group("kg");
    let a = accounts.user("ka", &[&disk]);
    let sockets = socket_dir();
    let c = cluster(&sockets);
    let remote = Remote::new(&c);
    let token = token_of(&c, &a);
    let groups_of_rank = || -> BTreeSet<u32> {
        let out = remote.run("prun", &token, &["-n", "1", "--", "id", "-G"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .split_whitespace()
            .map(|g| g.parse().expect("a gid"))
            .collect()
    };
    let before = groups_of_rank();
    assert!(before.contains(&disk.gid), "{before:?}");

    accounts.remove_from_group(&a, &disk);
    let after = groups_of_rank();
    assert_eq!(
        after,
        [a.gid].into(),
        "the token's job still ran in group {} after its user left it",
        disk.name
    );
    c.shutdown().unwrap();
}

/// After `userdel` the token is refused, naming the user; and when the uid goes to a new
/// account, the old token does not become theirs.
#[test]
fn a_deleted_users_token_is_refused() {
    if !root() {
        return;
    }
    let mut accounts = Accounts::new();
    let a = accounts.user("da", &[]);
    let sockets = socket_dir();
    let c = cluster(&sockets);
    let remote = Remote::new(&c);
    let token = token_of(&c, &a);
    assert!(remote.accepted(&token));

    accounts.delete_user(&a);
    let gone = format!(
        "not authenticated: the token's user {} (uid {}) no longer exists on this host",
        a.name, a.uid
    );
    refused(&remote.run("gangctl", &token, &["jobs"]), "gangctl", &gone);
    let out = remote.run("prun", &token, &["-n", "1", "--", "true"]);
    refused(&out, "prun", &gone);

    let b = accounts.user_with_uid("db", a.uid);
    assert_eq!(b.uid, a.uid);
    refused(
        &remote.run("gangctl", &token, &["jobs"]),
        "gangctl",
        &format!("{gone}: uid {} is now {}'s", a.uid, b.name),
    );
    // The new account's own token is theirs.
    let out = remote.run("prun", &token_of(&c, &b), &["-n", "1", "--", "id", "-un"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), b.name);
    c.shutdown().unwrap();
}

/// The ids of the tokens the master logged as issued to `user` (its JSON log).
fn logged_ids(c: &LocalCluster, user: &str) -> Vec<String> {
    let log = std::fs::read_to_string(c.master_log()).expect("the master's log");
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["fields"]["message"] == "token issued" && e["fields"]["user"] == user)
        .map(|e| e["fields"]["id"].as_str().expect("an id").to_string())
        .collect()
}

/// Revocation by the token's bearer (over TLS, the token read from stdin), by id (an
/// admin, finding the id in the master's log), and by user (the user, then an admin for
/// another user); each token is refused at once and after the master restarts. Another
/// user may not revoke by id or revoke someone else's tokens.
#[test]
fn revoked_tokens_are_refused_also_after_a_restart() {
    if !root() {
        return;
    }
    let mut accounts = Accounts::new();
    let a = accounts.user("va", &[]);
    let b = accounts.user("vb", &[]);
    let sockets = socket_dir();
    let mut c = cluster(&sockets);
    let remote = Remote::new(&c);
    let [a1, a3, a4, b1] = [&a, &a, &a, &b].map(|u| token_of(&c, u));
    // A's second token saved, as a user would: the message names its id.
    let out = as_user(&c, &a, "gangctl", &["token", "--save"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id2 = stdout(&out)
        .strip_prefix("token ")
        .and_then(|s| s.split_whitespace().next())
        .expect("`token ID for ...`")
        .to_string();
    let a2 = std::fs::read_to_string(a.home.join(".config/gang/token")).unwrap();
    for t in [&a1, &a2, &a3, &a4, &b1] {
        assert!(remote.accepted(t));
    }
    let revoked = |id: &str| {
        format!(
            "not authenticated: the token was revoked (token {id}); get a new one with \
             `gangctl token` on a cluster host"
        )
    };

    // The bearer, from afar, with the token on stdin (so it shows in no process list).
    let file = remote.home.path().join("a1");
    std::fs::write(&file, &a1).unwrap();
    let mut cmd = remote.command("gangctl", &a1, &["token", "revoke", "-"]);
    let out = output_within_stdin(&mut cmd, Stdio::from(File::open(&file).unwrap()), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let id1 = stdout(&out)
        .strip_prefix("revoked token ")
        .and_then(|s| s.strip_suffix(&format!(" of {}\n", a.name)))
        .unwrap_or_else(|| panic!("{}", stdout(&out)))
        .to_string();
    refused(
        &remote.run("gangctl", &a1, &["jobs"]),
        "gangctl",
        &revoked(&id1),
    );
    assert!(remote.accepted(&a2), "only that token");

    // By id: B may not; root (an admin) finds it in the log and may.
    let ids = logged_ids(&c, &a.name);
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids.contains(&id1) && ids.contains(&id2), "{ids:?}");
    let out = as_user(&c, &b, "gangctl", &["token", "revoke", "--id", &id2]);
    refused(
        &out,
        "gangctl",
        &format!(
            "{} may not revoke a token by its id: admins only (`admins` and `admin_groups` \
             in the master's config)",
            b.name
        ),
    );
    assert!(remote.accepted(&a2));
    let out = gangctl(&c, &["token", "revoke", "--id", &id2]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("revoked token {id2}\n"));
    refused(
        &remote.run("gangctl", &a2, &["jobs"]),
        "gangctl",
        &revoked(&id2),
    );

    // By user: B may not revoke A's tokens; A may, on the socket; root may revoke B's.
    let out = as_user(&c, &b, "gangctl", &["token", "revoke", "--user", &a.name]);
    refused(
        &out,
        "gangctl",
        &format!(
            "{} may not revoke the tokens of {}: only {} or an admin may",
            b.name, a.name, a.name
        ),
    );
    assert!(remote.accepted(&a3));
    let out = as_user(&c, &a, "gangctl", &["token", "revoke", "--user", &a.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!("revoked every token of {} issued until ", a.name)),
        "{}",
        stdout(&out)
    );
    let all_of_a = format!(
        "not authenticated: the token was revoked (with every token of {} issued until the \
         revocation); get a new one with `gangctl token` on a cluster host",
        a.name
    );
    for t in [&a3, &a4] {
        refused(&remote.run("gangctl", t, &["jobs"]), "gangctl", &all_of_a);
    }
    assert!(remote.accepted(&b1), "another user's tokens stay");
    let a5 = token_of(&c, &a);
    assert!(remote.accepted(&a5), "a token issued after the revocation");
    let out = gangctl(&c, &["token", "revoke", "--user", &b.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!remote.accepted(&b1));

    // A restart brings none of them back.
    let kept = c.dir().join("token.key.revoked");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", kept.display());
    c.restart_master().expect("the master restarts");
    refused(
        &remote.run("gangctl", &a1, &["jobs"]),
        "gangctl",
        &revoked(&id1),
    );
    refused(
        &remote.run("gangctl", &a2, &["jobs"]),
        "gangctl",
        &revoked(&id2),
    );
    let out = remote.run("prun", &a3, &["-n", "1", "--", "true"]);
    refused(&out, "prun", &all_of_a);
    assert!(!remote.accepted(&b1));
    assert!(remote.accepted(&a5));

    // Something not signed by this master is not a token to revoke.
    let out = gangctl(&c, &["token", "revoke", "not.a.token"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .starts_with("gangctl: cannot revoke the token given: the token is not valid: "),
        "{}",
        stderr(&out)
    );
    c.shutdown().unwrap();
}
