//! Starting a rank and seeing it through to its exit report.
//!
//! `Node::launch` (in `node.rs`) validates the request with the helpers here, spawns the
//! process built by `command`, then hands the child to a `Supervisor`, which owns it until
//! it is reaped. The supervisor is given the node's parts it reports to (rank registry,
//! outbox, switcher), not the node: this module stays below `node` in the module graph.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub use crate::env_policy::{
    ACCOUNT_ENV, Account, DEFAULT_PATH, DROPPED_ENV, PMI_ENV, USER_MSG_ENV, default_env,
    fill_account, filter_env, valid_env_name,
};
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{RankExit, Stream};
use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::error::Coord;
use crate::msg::MsgHub;
use crate::output::{Outbox, pump};
use crate::rank_files::RankFiles;
use crate::ranks::{RankKey, Ranks, StdinMsg, signal_group};
use crate::switch::{Switcher, freezer};

/// How long an exited rank's pipes may stay open (held by a process that escaped its
/// group) before the agent stops reading them and reports the exit anyway.
pub const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// Whose credentials the rank runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The agent's own.
    Agent,
    /// Switch to these in the child (the agent is root): supplementary groups, then gid,
    /// then uid.
    User {
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
    },
}

/// Why a rank may not run with the requested credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// uid 0, and the agent does not allow root ranks.
    Root,
    /// Another uid than the agent's, and the agent (running as this uid) is not root.
    NotRoot { agent: u32 },
}

/// Decide the rank's credentials. A root agent runs ranks as the submitting user, with
/// the groups the master identified; root itself only where the agent allows it (a job
/// as root is the whole node's, and its submitter's identity is only as good as the
/// master's word). An unprivileged agent (a personal test cluster) can only run ranks as
/// itself, and says so rather than silently running someone's job under the wrong
/// account.
pub fn run_as(
    agent_uid: u32,
    allow_root: bool,
    uid: u32,
    gid: u32,
    groups: &[u32],
) -> Result<RunAs, Refusal> {
    if uid == 0 && !allow_root {
        Err(Refusal::Root)
    } else if agent_uid == 0 {
        Ok(RunAs::User {
            uid,
            gid,
            groups: groups.to_vec(),
        })
    } else if uid == agent_uid {
        Ok(RunAs::Agent)
    } else {
        Err(Refusal::NotRoot { agent: agent_uid })
    }
}

/// The working directory must exist and be a directory. Checked before spawning so the
/// error names the directory, not the program.
pub fn check_cwd(cwd: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(cwd)?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(io::Error::from(Errno::ENOTDIR))
    }
}

/// Find `argv0` the way execvp would, in `path` (the rank's PATH) relative to `cwd`.
/// A name with a slash is taken as is (relative to `cwd`). Doing the lookup here, not in
/// the child, gives a clear error and uses the rank's PATH rather than the agent's.
pub fn resolve_program(argv0: &str, path: Option<&OsStr>, cwd: &Path) -> io::Result<PathBuf> {
    if argv0.contains('/') {
        return Ok(cwd.join(argv0));
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied = false;
    for dir in std::env::split_paths(path) {
        // An empty PATH entry means the current directory, i.e. the rank's cwd.
        let candidate = cwd.join(dir).join(argv0);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate);
            }
            Ok(meta) if meta.is_file() => denied = true,
            _ => {}
        }
    }
    Err(io::Error::from(if denied {
        Errno::EACCES
    } else {
        Errno::ENOENT
    }))
}

/// Everything a rank is started with, besides its process-group and pdeathsig setup.
#[derive(Debug)]
pub struct RankSpec<'a> {
    pub key: RankKey,
    pub size: u32,
    pub node: Coord,
    pub program: &'a Path,
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// The request's environment after the policy (`filter_env`, `fill_account`).
    pub env: &'a [(String, String)],
    /// GANG_* variables of the agent's own besides the rank's identity (the messaging
    /// library's directory, rectangle, host).
    pub gang_env: &'a [(String, String)],
    pub run_as: RunAs,
    pub stdin: bool,
    /// `prun --output/--error`: streams written to files instead of piped.
    pub files: RankFiles,
    /// `cgroup.procs` of the rank's freezer cgroup, open in the parent: the child writes
    /// "0" to it before exec, so it runs inside the cgroup from its first instruction.
    pub cgroup_procs: Option<std::os::fd::RawFd>,
    /// The rank's end of its PMI socketpair (`PMI_FD`, already in `gang_env`): the child
    /// keeps it open across exec.
    pub pmi_fd: Option<std::os::fd::RawFd>,
}

/// The environment of a rank: `spec.env` plus the GANG_* variables (which win over
/// same-named entries; of the job's own, only `USER_MSG_ENV` is kept).
pub fn rank_env(spec: &RankSpec<'_>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, _)| !k.starts_with("GANG_") || USER_MSG_ENV.contains(&k.as_str()))
        // A PMI connection of the submitting shell's (prun run inside another launcher)
        // is not the rank's: the agent sets its own, or none (`--mpi none`).
        .filter(|(k, _)| !PMI_ENV.contains(&k.as_str()))
        .cloned()
        .collect();
    env.extend([
        ("GANG_JOB_ID".into(), spec.key.job_id.to_string()),
        ("GANG_RANK".into(), spec.key.rank.to_string()),
        ("GANG_SIZE".into(), spec.size.to_string()),
        ("GANG_MESH_X".into(), spec.node.x.to_string()),
        ("GANG_MESH_Y".into(), spec.node.y.to_string()),
        (
            "GANG_NODE".into(),
            format!("{},{}", spec.node.x, spec.node.y),
        ),
    ]);
    env.extend(spec.gang_env.iter().cloned());
    env
}

/// Build the rank's command. Must be spawned from a task on a runtime worker thread (not
/// `spawn_blocking`): PR_SET_PDEATHSIG fires when the *thread* that forked exits, and
/// blocking-pool threads exit when idle.
///
/// The credentials are switched by the child itself, in `pre_exec`, rather than by std's
/// `uid`/`gid`: std can only clear supplementary groups (setting them is unstable), and
/// it enters the working directory after switching but before `pre_exec` runs, so the
/// directory must be entered here too, after the switch (as root, a rank would be
/// started inside a directory its user may not enter).
pub fn command(spec: &RankSpec<'_>) -> io::Result<Command> {
    let cwd = CString::new(spec.cwd.as_os_str().as_bytes())?;
    let credentials = match &spec.run_as {
        RunAs::Agent => None,
        RunAs::User { uid, gid, groups } => Some(Credentials {
            uid: *uid,
            gid: *gid,
            groups: groups.iter().map(|&g| g as libc::gid_t).collect(),
        }),
    };
    let mut cmd = Command::new(spec.program);
    cmd.arg0(&spec.argv[0])
        .args(&spec.argv[1..])
        .env_clear()
        .envs(rank_env(spec))
        .stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        // A stream that goes to a file gets it in pre_exec, as the user; until then
        // /dev/null, so no pipe is left that nobody reads.
        .stdout(piped_or_null(spec.files.stdout_piped()))
        .stderr(piped_or_null(spec.files.stderr_piped()))
        // Its own group: Signal and the leftover sweep reach its children too, and a ^C
        // at the agent's terminal does not.
        .process_group(0)
        .kill_on_drop(false);
    let agent_pid = std::process::id();
    let cgroup_procs = spec.cgroup_procs;
    let pmi_fd = spec.pmi_fd;
    let files = spec.files.clone();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (write, setgroups, setgid, setuid, chdir, prctl,
    // getppid) on data prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Still as root: the cgroup is the agent's, whatever the user may write.
            if let Some(fd) = cgroup_procs {
                freezer::enter(fd)?;
            }
            if let Some(fd) = pmi_fd {
                crate::pmi::inherit(fd)?;
            }
            if let Some(c) = &credentials {
                c.assume()?;
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            // As the user and in the job's directory: relative patterns land there, and
            // only where the user may write.
            files.redirect()?;
            // After the switch: a change of credentials clears the setting.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The agent may have died between fork and prctl; then no signal will come.
            if nix::unistd::getppid().as_raw() as u32 != agent_pid {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
    Ok(cmd)
}

fn piped_or_null(piped: bool) -> Stdio {
    if piped { Stdio::piped() } else { Stdio::null() }
}

/// A user's credentials, ready for the forked child.
struct Credentials {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

impl Credentials {
    /// Become the user: groups first and uid last, since each step needs the privilege
    /// the next one gives up. Only ever called in the forked child.
    fn assume(&self) -> io::Result<()> {
        let check = |r: libc::c_int| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls; `groups` outlives the call.
        unsafe {
            check(libc::setgroups(self.groups.len(), self.groups.as_ptr()))?;
            check(libc::setgid(self.gid))?;
            check(libc::setuid(self.uid))
        }
    }
}

/// What a reaped child's status reports to the master.
pub fn how_of(status: ExitStatus) -> How {
    match (status.signal(), status.code()) {
        (Some(sig), _) => How::Signal(sig),
        (None, Some(code)) => How::Code(code),
        // Neither exited nor signalled cannot come out of a reaping wait; report it as
        // something the master will show rather than panic.
        (None, None) => How::Error(format!("unknown exit status {status:?}")),
    }
}

/// The rank's pipes, taken from the child at spawn.
pub struct Pipes {
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// What a rank's supervisor needs of its node: where to mark it exited, where to queue its
/// output and exit, and the switcher that must stop managing it.
#[derive(Debug, Clone)]
pub struct Supervisor {
    pub node: Coord,
    pub ranks: Arc<Ranks>,
    pub outbox: Arc<Outbox>,
    pub switch: Arc<Switcher>,
    pub msg: Arc<MsgHub>,
}

impl Supervisor {
    /// Own the rank from spawn to exit report: reap it (a stopped rank is never reported:
    /// `Child::wait` only returns on exit), sweep its group, drain its output, then queue
    /// the exit behind that output.
    pub async fn supervise(self, key: RankKey, mut child: Child, pgid: Pid, pipes: Pipes) {
        // Read both pipes concurrently: a rank blocked writing a full stderr pipe while we
        // wait on its stdout would never finish.
        let mut pumps: Vec<JoinHandle<()>> = Vec::with_capacity(2);
        if let Some(pipe) = pipes.stdout {
            let outbox = Arc::clone(&self.outbox);
            pumps.push(tokio::spawn(async move {
                pump(pipe, key, Stream::Stdout, &outbox).await;
            }));
        }
        if let Some(pipe) = pipes.stderr {
            let outbox = Arc::clone(&self.outbox);
            pumps.push(tokio::spawn(async move {
                pump(pipe, key, Stream::Stderr, &outbox).await;
            }));
        }

        let how = match child.wait().await {
            Ok(status) => how_of(status),
            Err(e) => {
                // Should not happen; make sure the child is gone and reaped before moving on.
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    "waiting for rank: {e}"
                );
                signal_group(pgid, Signal::SIGKILL);
                match child.wait().await {
                    Ok(status) => how_of(status),
                    Err(e) => {
                        How::Error(format!("node {}: cannot wait for the rank: {e}", self.node))
                    }
                }
            }
        };
        let abort = self.msg.pmi_finished(key).await;
        // Ended by the agent on its PMI abort: reported with the code the rank gave.
        let how = match &abort {
            Some(a) => How::Code(a.code),
            None => how,
        };
        let abort = abort.map(|a| a.what);
        self.ranks.mark_exited(key);
        self.msg.remove(key);
        // No longer switched; its freezer cgroup (if any) is thawed so what is left can die.
        let cgroup = self.switch.rank_ended(key);
        // Leftover members of the group (`cmd &` in a script) would keep the pipes open and
        // outlive the job.
        signal_group(pgid, Signal::SIGKILL);
        self.ranks.swept(pgid);
        if let Some(cgroup) = cgroup {
            tokio::spawn(cgroup.run());
        }

        let drained = tokio::time::timeout(PIPE_DRAIN, async {
            for p in &mut pumps {
                let _ = p.await;
            }
        })
        .await;
        if drained.is_err() {
            warn!(
                job_id = key.job_id,
                rank = key.rank,
                "output pipes still open {PIPE_DRAIN:?} after exit (a process left the rank's group?): reporting the exit anyway"
            );
            for p in &pumps {
                p.abort();
            }
            // Wait for the aborted readers to be gone, so that nothing of theirs can be
            // queued after the exit.
            for p in &mut pumps {
                let _ = p.await;
            }
        }
        info!(job_id = key.job_id, rank = key.rank, ?how, "rank exited");
        self.outbox.push_exit(RankExit {
            job_id: key.job_id,
            rank: key.rank,
            x: self.node.x,
            y: self.node.y,
            how: Some(how),
            abort,
            // The outbox fills in what the rank produced.
            ..Default::default()
        });
    }
}

/// Write what the Stdin RPC sends into the rank's stdin, in order; `Eof` (or the channel
/// closing when the rank is reaped) closes the pipe.
pub async fn feed_stdin(mut pipe: ChildStdin, mut rx: mpsc::Receiver<StdinMsg>, key: RankKey) {
    while let Some(msg) = rx.recv().await {
        match msg {
            StdinMsg::Data(data) => {
                if let Err(e) = pipe.write_all(&data).await {
                    // The rank closed its stdin or exited: later data has nowhere to go.
                    debug!(job_id = key.job_id, rank = key.rank, "stdin closed: {e}");
                    return;
                }
            }
            StdinMsg::Eof => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    #[test]
    fn a_job_sets_the_messaging_knobs_but_never_the_agents_variables() {
        let env: Vec<(String, String)> = [
            ("GANG_RANK", "7"),
            ("GANG_MSG_DIR", "/elsewhere"),
            ("GANG_MSG_FLUSH", "off"),
            ("GANG_MSG_SPIN_US", "50"),
            ("PMI_FD", "9"),
            ("PMI_DEBUG", "1"),
            ("HOME", "/home/u"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let gang_env = vec![(
            "GANG_MSG_DIR".to_string(),
            "/run/gang/msg/0-0/1.0".to_string(),
        )];
        let spec = RankSpec {
            key: RankKey { job_id: 1, rank: 0 },
            size: 2,
            node: Coord { x: 0, y: 0 },
            program: Path::new("/bin/true"),
            argv: &[],
            cwd: Path::new("/"),
            env: &env,
            gang_env: &gang_env,
            run_as: RunAs::Agent,
            stdin: false,
            files: RankFiles::default(),
            cgroup_procs: None,
            pmi_fd: None,
        };
        let got: std::collections::BTreeMap<_, _> = rank_env(&spec).into_iter().collect();
        assert_eq!(got["GANG_RANK"], "0");
        assert_eq!(got["GANG_MSG_DIR"], "/run/gang/msg/0-0/1.0");
        assert_eq!(got["GANG_MSG_FLUSH"], "off");
        assert_eq!(got["GANG_MSG_SPIN_US"], "50");
        assert_eq!(got["HOME"], "/home/u");
        assert!(!got.contains_key("PMI_FD"));
        assert_eq!(got["PMI_DEBUG"], "1");
    }

    #[test]
    fn run_as_rules() {
        let user = |uid, gid, groups: &[u32]| RunAs::User {
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert_eq!(run_as(0, false, 0, 0, &[]), Err(Refusal::Root));
        assert_eq!(run_as(0, true, 0, 0, &[0]), Ok(user(0, 0, &[0])));
        assert_eq!(
            run_as(0, false, 1000, 100, &[100, 27]),
            Ok(user(1000, 100, &[100, 27]))
        );
        assert_eq!(run_as(1000, false, 1000, 1000, &[5]), Ok(RunAs::Agent));
        assert_eq!(
            run_as(1000, false, 1001, 1000, &[]),
            Err(Refusal::NotRoot { agent: 1000 })
        );
        assert_eq!(run_as(1000, false, 0, 0, &[]), Err(Refusal::Root));
        assert_eq!(
            run_as(1000, true, 0, 0, &[]),
            Err(Refusal::NotRoot { agent: 1000 })
        );
    }

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

    #[test]
    fn resolve_uses_the_given_path() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("prog");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(
            resolve_program("prog", Some(&path), Path::new("/")).unwrap(),
            prog
        );
        let err =
            resolve_program("prog", Some(OsStr::new("/nonexistent")), Path::new("/")).unwrap_err();
        assert_eq!(err.to_string(), "No such file or directory (os error 2)");
        // An empty entry is the rank's working directory.
        assert_eq!(
            resolve_program("prog", Some(OsStr::new(":/x")), dir.path()).unwrap(),
            prog
        );
        // A name with a slash is taken relative to the working directory.
        assert_eq!(
            resolve_program("./prog", None, dir.path()).unwrap(),
            dir.path().join("./prog")
        );
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = resolve_program("prog", Some(&path), Path::new("/")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::EACCES as i32));
    }

    #[test]
    fn cwd_must_be_a_directory() {
        assert_eq!(
            check_cwd(Path::new("/nope")).unwrap_err().to_string(),
            "No such file or directory (os error 2)"
        );
        assert_eq!(
            check_cwd(Path::new("/proc/self/status"))
                .unwrap_err()
                .to_string(),
            "Not a directory (os error 20)"
        );
        check_cwd(Path::new("/")).unwrap();
    }
}
