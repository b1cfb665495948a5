//! The rank's process: its environment, the command that starts it as its submitter (in
//! its own process group, in its freezer cgroup if it has one, with its output files and
//! PMI socket), the spawn, and the writer of its stdin; or, asked for (`prun -u`,
//! `--pty`), on a pseudo-terminal of its own (`pty`). Everything the child uses is
//! prepared before the fork; the child only makes system calls on it.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::failure::Failure;
use super::lookup::Found;
use super::plan::{LaunchPlan, RunAs};
use crate::error::Coord;
use crate::launch::env_policy::{self, PMI_ENV};
use crate::launch::rank_files::RankFiles;
use crate::ranks::{RankKey, StdinMsg};
use crate::switch::freezer;

/// Stdin messages buffered per rank before the Stdin RPC waits (back-pressure to the
/// client when the rank does not read).
const STDIN_QUEUE: usize = 64;

/// What the rank is given, for its command.
pub struct Given {
    /// The agent's variables besides the rank's identity (GANG_*, PMI_*, PMIX_*, the
    /// checking library's preload).
    pub gang_env: Vec<(String, String)>,
    /// The rank's end of its PMI socketpair (`PMI_FD`).
    pub pmi_fd: Option<OwnedFd>,
    /// Its state page, sealed memory (`GANG_STATE_FD`).
    pub state_fd: OwnedFd,
    /// `cgroup.procs` of a FREEZE rank's cgroup, which the child enters before exec.
    pub cgroup_procs: Option<RawFd>,
    /// `cgroup.procs` of its accounting cgroups (`usage`), entered the same way.
    pub usage_procs: Vec<RawFd>,
}

/// A rank's process, just spawned.
pub struct Spawned {
    pub child: Child,
    pub pid: u32,
    /// process_group(0): the rank leads its own group, whose id is its pid.
    pub pgid: Pid,
    /// Where the Stdin RPC writes, if the rank reads stdin.
    pub stdin: Option<mpsc::Sender<StdinMsg>>,
    pub pipes: Pipes,
}

/// Spawn the planned rank with what it was found and given. Must run in a task on a
/// runtime worker thread (see `command`).
pub fn spawn_rank(
    plan: &LaunchPlan,
    env_allow: &BTreeSet<String>,
    found: Found,
    given: Given,
) -> Result<Spawned, Failure> {
    let req = &plan.req;
    let env = policy_env(plan, env_allow);
    // Everything of a terminal is made before the fork: nothing can fail after it.
    let terminal = match req.pty {
        true => Some(super::pty::Terminal::open(&plan.run_as).map_err(|e| {
            Failure::Start(io::Error::other(format!(
                "cannot open a pseudo-terminal for the rank: {e}"
            )))
        })?),
        false => None,
    };
    // A batch script runs from the file made for it in the rank's own directory.
    let with_script;
    let argv: &[String] = match &req.script {
        Some((_, at)) => {
            let dir = given
                .gang_env
                .iter()
                .find(|(k, _)| k == gang_msg::abi::env::MSG_DIR)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let mut a = req.argv.clone();
            a.insert((*at).min(a.len()), format!("{dir}/{}", crate::msg::SCRIPT));
            with_script = a;
            &with_script
        }
        None => &req.argv,
    };
    let spec = RankSpec {
        key: req.key,
        size: req.size,
        node: plan.node,
        program: &found.program,
        argv,
        cwd: Path::new(&req.cwd),
        env: &env,
        gang_env: &given.gang_env,
        run_as: plan.run_as.clone(),
        stdin: req.stdin,
        files: found.files,
        cgroup_procs: given.cgroup_procs,
        usage_procs: given.usage_procs.clone(),
        pmi_fd: given.pmi_fd.as_ref().map(|fd| fd.as_raw_fd()),
        state_fd: Some(given.state_fd.as_raw_fd()),
        pty: terminal.as_ref().map(|t| t.slave.as_raw_fd()),
    };
    let spawned = command(&spec).and_then(|mut cmd| cmd.spawn());
    // The rank has the slave as its stdio: the agent's copy would keep the terminal open
    // after the rank exits, and its end would never be read.
    let terminal = terminal.map(super::pty::Terminal::spawned);
    // The rank has its copy of its PMI socket's end (or failed): the agent's would keep
    // the socket open after the rank exits. The state page stays mapped without it.
    drop(given.pmi_fd);
    drop(given.state_fd);
    let mut child = spawned.map_err(|e| match spec.files.explain(&e) {
        Some(file) => Failure::OutputFile(file),
        None => Failure::Spawn(e),
    })?;
    let Some(pid) = child.id() else {
        // Only possible if the child was already reaped, which nobody else does.
        return Err(Failure::Start(io::Error::other(
            "the process vanished at spawn",
        )));
    };
    let (stdin, pipes) = stdio(&mut child, terminal, req.stdin, req.key);
    Ok(Spawned {
        child,
        pid,
        pgid: Pid::from_raw(pid as i32),
        stdin,
        pipes,
    })
}

/// The writer of the rank's stdin, if it reads one, and what its output is read from:
/// its pipes, or its terminal (which, without stdin, gets its end at once, as /dev/null
/// would give).
fn stdio(
    child: &mut Child,
    terminal: Option<(super::pty::PtyMaster, OwnedFd)>,
    reads_stdin: bool,
    key: RankKey,
) -> (Option<mpsc::Sender<StdinMsg>>, Pipes) {
    let (stdin, pty) = match terminal {
        Some((master, writer)) => {
            let (tx, rx) = match reads_stdin {
                true => {
                    let (tx, rx) = mpsc::channel(STDIN_QUEUE);
                    (Some(tx), Some(rx))
                }
                false => (None, None),
            };
            tokio::spawn(super::pty::feed(writer, rx, key));
            (tx, Some(master))
        }
        None => {
            let stdin = child.stdin.take().map(|pipe| {
                let (tx, rx) = mpsc::channel(STDIN_QUEUE);
                tokio::spawn(feed_stdin(pipe, rx, key));
                tx
            });
            (stdin, None)
        }
    };
    let pipes = Pipes {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        pty,
    };
    (stdin, pipes)
}

/// The request's environment under the agent's policy (the password entry is read here,
/// after the reservation, and only if needed); what it dropped is logged.
fn policy_env(plan: &LaunchPlan, env_allow: &BTreeSet<String>) -> Vec<(String, String)> {
    let req = &plan.req;
    let (env, dropped) =
        env_policy::apply(&req.env, env_allow, req.submitter.uid, &req.submitter.user);
    if !dropped.is_empty() {
        info!(
            job_id = req.key.job_id,
            rank = req.key.rank,
            dropped = %dropped.join(","),
            "variables dropped from the rank's environment: they make every process it starts load code or write files (the agent's env_allow keeps them)"
        );
    }
    env
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
    /// `cgroup.procs` of its accounting cgroups, entered the same way.
    pub usage_procs: Vec<std::os::fd::RawFd>,
    /// The rank's end of its PMI socketpair (`PMI_FD`, already in `gang_env`): the child
    /// keeps it open across exec.
    pub pmi_fd: Option<std::os::fd::RawFd>,
    /// Its state page (`GANG_STATE_FD`, already in `gang_env`), kept open across exec.
    pub state_fd: Option<std::os::fd::RawFd>,
    /// The slave of its pseudo-terminal (`prun -u`, `--pty`): its stdin, stdout, stderr
    /// and controlling terminal, in a session of its own.
    pub pty: Option<std::os::fd::RawFd>,
}

/// The environment of a rank: `spec.env` plus the GANG_* variables (which win over
/// same-named entries; of the job's own, only `USER_MSG_ENV` is kept).
pub fn rank_env(spec: &RankSpec<'_>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, _)| crate::launch::env_policy::job_may_set(k))
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
        .kill_on_drop(false);
    match spec.pty {
        Some(slave) => {
            let stdio = || -> io::Result<Stdio> {
                // SAFETY: `slave` is open for the whole of the spawn (the caller's).
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(slave) };
                Ok(Stdio::from(fd.try_clone_to_owned()?))
            };
            // Its own session (made in pre_exec): its own group too, as below.
            cmd.stdin(stdio()?).stdout(stdio()?).stderr(stdio()?);
        }
        None => {
            cmd.stdin(if spec.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            // A stream that goes to a file gets it in pre_exec, as the user; until then
            // /dev/null, so no pipe is left that nobody reads.
            .stdout(piped_or_null(spec.files.stdout_piped()))
            .stderr(piped_or_null(spec.files.stderr_piped()))
            // Its own group: Signal and the leftover sweep reach its children too, and a
            // ^C at the agent's terminal does not.
            .process_group(0);
        }
    }
    let on_pty = spec.pty.is_some();
    let agent_pid = std::process::id();
    let cgroup_procs = spec.cgroup_procs;
    let usage_procs = spec.usage_procs.clone();
    let kept = [spec.pmi_fd, spec.state_fd];
    let files = spec.files.clone();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setsid, ioctl, write, close_range, fcntl,
    // setgroups, setgid, setuid, chdir, prctl, getppid) on data prepared before the
    // fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if on_pty {
                super::pty::take_terminal()?;
            }
            // Still as root: the cgroup is the agent's, whatever the user may write.
            if let Some(fd) = cgroup_procs {
                freezer::enter(fd)?;
            }
            crate::launch::usage::enter(&usage_procs)?;
            // Nothing of the agent's reaches the rank but what it is given: descriptors
            // the agent inherited without close-on-exec (its starter's pipes) would
            // otherwise be the rank's too.
            close_on_exec_from(3)?;
            for fd in kept.into_iter().flatten() {
                crate::mpi::pmi::inherit(fd)?;
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

/// Mark every descriptor from `first` up close-on-exec. Async-signal-safe (one system
/// call).
fn close_on_exec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// The rank's pipes, taken from the child at spawn, or its terminal's master side.
pub struct Pipes {
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    /// Its stdout and stderr both, on a pseudo-terminal.
    pub pty: Option<super::pty::PtyMaster>,
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
            usage_procs: Vec::new(),
            pmi_fd: None,
            state_fd: None,
            pty: None,
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
}
