//! What of a job's environment reaches its ranks: variables that would make every
//! process load code or write files are dropped (unless the agent's `env_allow` keeps
//! them), the account variables are filled in from this node's password entry, and the
//! GANG_* and PMI_* names are the agent's, but for the messaging library's tuning knobs.
//! `launch::rank_env` puts it together; docs/internals/agent.md ("Environment") has the table.

use std::collections::{BTreeSet, HashMap};

use tracing::warn;

/// Variables dropped from a rank's environment unless the agent's `env_allow` lists
/// them. Each makes the dynamic loader or libc load code from a path it names, or write
/// files where it says, in *every* process the rank starts (glibc ignores the same ones,
/// among others, for setuid programs: `sysdeps/generic/unsecvars.h`). The request's
/// environment is typically the submitting shell's, copied whole, so a preload meant for
/// one desktop session would otherwise be injected into every process of every rank on
/// every node. docs/internals/agent.md ("Environment") has the table, with what is kept and why.
pub const DROPPED_ENV: &[&str] = &[
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_ORIGIN_PATH",
    "LD_PROFILE",
    "LD_PROFILE_OUTPUT",
    "LD_DEBUG_OUTPUT",
    "LD_USE_LOAD_BIAS",
    "GCONV_PATH",
    "GETCONF_DIR",
    "MALLOC_TRACE",
];

/// A name `execve` can pass on unambiguously: `NAME=value` with no `=` in NAME (a name
/// like `LD_PRELOAD=/x.so` would otherwise reach the loader as LD_PRELOAD, past the
/// filter) and no NUL.
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// The request's environment without the dropped variables (those not in `allow`), and
/// the names dropped (sorted). Names must have passed `valid_env_name`.
pub fn filter_env(
    env: &HashMap<String, String>,
    allow: &BTreeSet<String>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut kept = Vec::with_capacity(env.len());
    let mut dropped = Vec::new();
    for (k, v) in env {
        if DROPPED_ENV.contains(&k.as_str()) && !allow.contains(k) {
            dropped.push(k.clone());
        } else {
            kept.push((k.clone(), v.clone()));
        }
    }
    dropped.sort();
    (kept, dropped)
}

/// What a rank's account defaults come from: the password entry of its uid on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    pub user: Option<String>,
    pub home: Option<String>,
    /// The login shell (only used for a request with no environment at all).
    pub shell: Option<String>,
}

impl Account {
    /// The password entry of `uid`, else just the name the master gave (`user`, may be
    /// empty). A lookup is a blocking NSS call (files, or LDAP/SSSD where configured).
    pub fn of(uid: u32, user: &str) -> Account {
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => {
                if !user.is_empty() && user != u.name {
                    // Same uid, another name: the master's user database and this node's
                    // disagree. The uid is what the rank runs as; its name here is the one
                    // `id -un` will print.
                    warn!(
                        uid,
                        here = %u.name,
                        master = user,
                        "the uid has another name on this node than on the master"
                    );
                }
                Account {
                    user: Some(u.name),
                    home: Some(u.dir.to_string_lossy().into_owned()),
                    shell: Some(u.shell.to_string_lossy().into_owned()).filter(|s| !s.is_empty()),
                }
            }
            _ => Account {
                user: (!user.is_empty()).then(|| user.to_owned()),
                home: None,
                shell: None,
            },
        }
    }
}

/// The variables `fill_account` sets.
pub const ACCOUNT_ENV: [&str; 3] = ["USER", "LOGNAME", "HOME"];

/// Set USER, LOGNAME and HOME from `account` where the request did not: what a login
/// would set, and what many programs (ssh, MPI launchers, shells) expect.
pub fn fill_account(env: &mut Vec<(String, String)>, account: &Account) {
    let defaults = [
        ("USER", &account.user),
        ("LOGNAME", &account.user),
        ("HOME", &account.home),
    ];
    for (name, value) in defaults {
        if let Some(value) = value
            && !env.iter().any(|(k, _)| k == name)
        {
            env.push((name.to_owned(), value.clone()));
        }
    }
}

/// The policy applied to a request's environment `env`: the dropped variables left out
/// (their names returned, sorted), USER, LOGNAME and HOME filled in from the password
/// entry of `uid` where `env` lacks them, and a login-like environment for a request
/// with none. The password entry (a blocking NSS call) is looked up only when needed.
pub fn apply(
    env: &HashMap<String, String>,
    allow: &BTreeSet<String>,
    uid: u32,
    user: &str,
) -> (Vec<(String, String)>, Vec<String>) {
    let (mut kept, dropped) = filter_env(env, allow);
    if env.is_empty() {
        kept = default_env(&Account::of(uid, user));
    } else if ACCOUNT_ENV.iter().any(|name| !env.contains_key(*name)) {
        fill_account(&mut kept, &Account::of(uid, user));
    }
    (kept, dropped)
}

/// PATH of a job submitted with no environment: systemd's default for services, so a
/// program an administrator installed anywhere usual is found, as from a login shell.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// LANG of a job submitted with no environment: UTF-8 without assuming a locale that may
/// not be generated on the node (C.UTF-8 is built into glibc since 2.35).
pub const DEFAULT_LANG: &str = "C.UTF-8";

/// The environment of a job whose request gave none (an API client that did not copy a
/// shell's, as `prun` does): what a login would set, so `argv[0]` and whatever it runs are
/// found. A request with any variable is used as given instead (as Slurm's
/// `--export=VARS` and Flux's jobspec are), but for `fill_account`.
pub fn default_env(account: &Account) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
        ("LANG".to_owned(), DEFAULT_LANG.to_owned()),
    ];
    if let Some(shell) = &account.shell {
        env.push(("SHELL".to_owned(), shell.clone()));
    }
    fill_account(&mut env, account);
    env
}

/// The messaging library's tuning knobs a job may set itself (how long a receive spins,
/// the quiesce lead, the transport, switching the flush off for a comparison); every
/// other GANG_* variable is the agent's to set.
pub const USER_MSG_ENV: [&str; 4] = [
    "GANG_MSG_SPIN_US",
    "GANG_MSG_LEAD_US",
    "GANG_MSG_TRANSPORT",
    "GANG_MSG_FLUSH",
];

/// A job array task's place (GANG_ARRAY_JOB_ID, _TASK_ID, _TASK_COUNT, _MIN, _MAX): the
/// master puts them in the task's environment at submission, so they pass as the job's.
/// One a user set on another job only mislabels that user's own job.
pub const ARRAY_ENV_PREFIX: &str = "GANG_ARRAY_";

/// Whether a GANG_* variable of the job's own environment reaches its ranks.
pub fn job_may_set(name: &str) -> bool {
    !name.starts_with("GANG_") || USER_MSG_ENV.contains(&name) || name.starts_with(ARRAY_ENV_PREFIX)
}

/// The PMI-1 connection variables: the agent's to set (`pmi::PmiJob::env`), never the
/// job's. (PMI_DEBUG and the like are the job's own.)
pub const PMI_ENV: [&str; 6] = [
    "PMI_FD",
    "PMI_PORT",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_JOBID",
    "PMI_APPNUM",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_policy_drops_injections_unless_allowed_and_fills_the_account() {
        let env: HashMap<String, String> = [
            ("LD_PRELOAD", "/home/a/hook.so"),
            ("LD_AUDIT", "x.so"),
            ("GCONV_PATH", "/tmp/g"),
            ("LD_LIBRARY_PATH", "/opt/mpi/lib"),
            ("PATH", "/bin"),
            ("HOME", "/scratch/a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let allow: BTreeSet<String> = ["LD_AUDIT".to_owned()].into();
        let (mut kept, dropped) = filter_env(&env, &allow);
        assert_eq!(dropped, ["GCONV_PATH", "LD_PRELOAD"]);
        fill_account(
            &mut kept,
            &Account {
                user: Some("alice".into()),
                home: Some("/home/alice".into()),
                shell: None,
            },
        );
        kept.sort();
        let want: Vec<(String, String)> = [
            ("HOME", "/scratch/a"),
            ("LD_AUDIT", "x.so"),
            ("LD_LIBRARY_PATH", "/opt/mpi/lib"),
            ("LOGNAME", "alice"),
            ("PATH", "/bin"),
            ("USER", "alice"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(kept, want);

        assert!(valid_env_name("LD_LIBRARY_PATH"));
        assert!(!valid_env_name("LD_PRELOAD=/x.so"));
        assert!(!valid_env_name(""));
        assert!(!valid_env_name("A\0B"));
    }

    #[test]
    fn the_account_is_looked_up_only_for_what_the_request_lacks() {
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .unwrap();
        let uid = user.uid.as_raw();
        let given: HashMap<String, String> = [
            ("USER", "someone"),
            ("LOGNAME", "someone"),
            ("HOME", "/elsewhere"),
            ("LD_AUDIT", "x.so"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (mut env, dropped) = apply(&given, &BTreeSet::new(), uid, "");
        env.sort();
        assert_eq!(dropped, ["LD_AUDIT"]);
        assert_eq!(
            env,
            [
                ("HOME".to_owned(), "/elsewhere".to_owned()),
                ("LOGNAME".to_owned(), "someone".to_owned()),
                ("USER".to_owned(), "someone".to_owned()),
            ]
        );
        let lacking: HashMap<String, String> =
            [("HOME".to_owned(), "/elsewhere".to_owned())].into();
        let (env, _) = apply(&lacking, &BTreeSet::new(), uid, "");
        assert!(env.contains(&("USER".to_owned(), user.name.clone())));
        let (env, _) = apply(&HashMap::new(), &BTreeSet::new(), uid, "");
        assert!(env.contains(&("PATH".to_owned(), DEFAULT_PATH.to_owned())));
    }

    #[test]
    fn a_request_without_environment_gets_a_login_like_one() {
        let mut env = default_env(&Account {
            user: Some("alice".into()),
            home: Some("/home/alice".into()),
            shell: Some("/bin/bash".into()),
        });
        env.sort();
        let want: Vec<(String, String)> = [
            ("HOME", "/home/alice"),
            ("LANG", "C.UTF-8"),
            ("LOGNAME", "alice"),
            ("PATH", DEFAULT_PATH),
            ("SHELL", "/bin/bash"),
            ("USER", "alice"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(env, want);
    }

    #[test]
    fn accounts_come_from_the_password_entry() {
        assert_eq!(
            Account::of(0, ""),
            Account {
                user: Some("root".into()),
                home: nix::unistd::User::from_uid(0.into())
                    .unwrap()
                    .map(|u| u.dir.to_string_lossy().into_owned()),
                shell: nix::unistd::User::from_uid(0.into())
                    .unwrap()
                    .map(|u| u.shell.to_string_lossy().into_owned()),
            }
        );
        // Not a user here: the master's name, and no home to claim.
        assert_eq!(
            Account::of(4_000_000_000, "ghost"),
            Account {
                user: Some("ghost".into()),
                home: None,
                shell: None,
            }
        );
        assert_eq!(Account::of(4_000_000_000, ""), Account::default());
    }
}
