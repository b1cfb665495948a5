//! Starting a rank and seeing it through to its exit report.
//!
//! `Node::launch` (in `node.rs`) validates the request with the helpers here, spawns the
//! process built by `command`, then hands the child to a `Supervisor`, which owns it until
//! it is reaped. The supervisor is given the node's parts it reports to (rank registry,
//! outbox, switcher), not the node: this module stays below `node` in the module graph.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

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
use crate::output::{Outbox, pump};
use crate::ranks::{RankKey, Ranks, StdinMsg, signal_group};
use crate::switch::{Switcher, freezer};

/// How long an exited rank's pipes may stay open (held by a process that escaped its
/// group) before the agent stops reading them and reports the exit anyway.
pub const PIPE_DRAIN: Duration = Duration::from_secs(2);

/// Used when neither the request nor the agent has a PATH.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Whose credentials the rank runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAs {
    /// The agent's own.
    Agent,
    /// Switch to these (the agent is root).
    User { uid: u32, gid: u32 },
}

/// Decide the rank's credentials. A root agent runs ranks as the submitting user; an
/// unprivileged agent (a personal test cluster) can only run ranks as itself, and says so
/// rather than silently running someone's job under the wrong account.
pub fn run_as(agent_uid: u32, uid: u32, gid: u32) -> Result<RunAs, u32> {
    if agent_uid == 0 {
        if uid == 0 && gid == 0 {
            Ok(RunAs::Agent)
        } else {
            Ok(RunAs::User { uid, gid })
        }
    } else if uid == agent_uid {
        Ok(RunAs::Agent)
    } else {
        Err(agent_uid)
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
    pub env: &'a HashMap<String, String>,
    pub run_as: RunAs,
    pub stdin: bool,
    /// `cgroup.procs` of the rank's freezer cgroup, open in the parent: the child writes
    /// "0" to it before exec, so it runs inside the cgroup from its first instruction.
    pub cgroup_procs: Option<std::os::fd::RawFd>,
}

/// The environment of a rank: exactly the request's, plus the GANG_* variables (which win
/// over same-named request entries).
pub fn rank_env(spec: &RankSpec<'_>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, _)| !k.starts_with("GANG_"))
        .map(|(k, v)| (k.clone(), v.clone()))
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
    env
}

/// Build the rank's command. Must be spawned from a task on a runtime worker thread (not
/// `spawn_blocking`): PR_SET_PDEATHSIG fires when the *thread* that forked exits, and
/// blocking-pool threads exit when idle.
pub fn command(spec: &RankSpec<'_>) -> Command {
    let mut cmd = Command::new(spec.program);
    cmd.arg0(&spec.argv[0])
        .args(&spec.argv[1..])
        .current_dir(spec.cwd)
        .env_clear()
        .envs(rank_env(spec))
        .stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: Signal and the leftover sweep reach its children too, and a ^C
        // at the agent's terminal does not.
        .process_group(0)
        .kill_on_drop(false);
    if let RunAs::User { uid, gid } = spec.run_as {
        // std drops supplementary groups (setgroups(0)) before setuid when uid is set, so
        // the rank does not keep root's groups.
        cmd.uid(uid).gid(gid);
    }
    let agent_pid = std::process::id();
    let cgroup_procs = spec.cgroup_procs;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (write, prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = cgroup_procs {
                freezer::enter(fd)?;
            }
            // std runs this after setuid/setgid, which would have cleared the setting.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The agent may have died between fork and prctl; then no signal will come.
            if nix::unistd::getppid().as_raw() as u32 != agent_pid {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
    cmd
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
        self.ranks.mark_exited(key);
        // No longer switched; its freezer cgroup (if any) is thawed so what is left can die.
        let cgroup = self.switch.rank_ended(key);
        // Leftover members of the group (`cmd &` in a script) would keep the pipes open and
        // outlive the job.
        signal_group(pgid, Signal::SIGKILL);
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
    use super::*;

    #[test]
    fn run_as_rules() {
        assert_eq!(run_as(0, 0, 0), Ok(RunAs::Agent));
        assert_eq!(
            run_as(0, 1000, 100),
            Ok(RunAs::User {
                uid: 1000,
                gid: 100
            })
        );
        assert_eq!(run_as(0, 0, 5), Ok(RunAs::User { uid: 0, gid: 5 }));
        assert_eq!(run_as(1000, 1000, 1000), Ok(RunAs::Agent));
        assert_eq!(run_as(1000, 1001, 1000), Err(1000));
        assert_eq!(run_as(1000, 0, 0), Err(1000));
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
