//! The node: what the NodeAgent service and the registry session act on. It owns the rank
//! registry and the outbox, and implements Launch, Signal and Stdin in domain terms (the
//! gRPC adapter in `service.rs` only converts).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::error::{AgentError, Coord};
use crate::launch::{self, Pipes, RankSpec, Refusal, RunAs, Supervisor};
use crate::msg::{MsgHub, MsgLaunch};
use crate::output::Outbox;
use crate::rank_files::RankFiles;
use crate::ranks::{Ranks, ReserveError, StdinMsg, StdinTarget};
use crate::request::{Mpi, RankRequest};
use crate::switch::Switcher;

/// What Launch requests this node accepts (the agent's configuration).
#[derive(Debug, Clone, Default)]
pub struct LaunchPolicy {
    /// Whether ranks may run as root (uid 0).
    pub allow_root: bool,
    /// Variables of `launch::DROPPED_ENV` to pass on all the same.
    pub env_allow: BTreeSet<String>,
}

/// Stdin messages buffered per rank before the Stdin RPC waits (back-pressure to the
/// client when the rank does not read).
const STDIN_QUEUE: usize = 64;

#[derive(Debug)]
pub struct Node {
    pub coord: Coord,
    pub ranks: Arc<Ranks>,
    pub outbox: Arc<Outbox>,
    /// SIGTERM-to-SIGKILL grace for jobs the master tells us to drop.
    pub kill_grace: Duration,
    /// Time slicing: the slice tables and the switch thread.
    pub switch: Arc<Switcher>,
    /// The master clock as this node estimates it.
    pub clock: Arc<Clock>,
    /// The ranks' messaging-library directories, fences and activity.
    pub msg: Arc<MsgHub>,
    policy: LaunchPolicy,
    agent_uid: u32,
}

impl Node {
    pub fn new(
        coord: Coord,
        kill_grace: Duration,
        policy: LaunchPolicy,
        switch: Arc<Switcher>,
        clock: Arc<Clock>,
        msg: Arc<MsgHub>,
    ) -> Arc<Self> {
        Arc::new(Node {
            msg,
            coord,
            ranks: Ranks::new(),
            outbox: Arc::new(Outbox::new()),
            kill_grace,
            switch,
            clock,
            policy,
            agent_uid: nix::unistd::geteuid().as_raw(),
        })
    }

    /// Start one rank; returns its pid. Must run in a task on a runtime worker thread
    /// (see `launch::command`).
    pub fn launch(&self, req: RankRequest) -> Result<u32, AgentError> {
        let node = self.coord;
        let invalid = |what: String| AgentError::InvalidArgument { node, what };
        let key = req.key;
        let Some(argv0) = req.argv.first() else {
            return Err(invalid("empty argv: nothing to run".into()));
        };
        if argv0.is_empty() {
            return Err(invalid("argv[0] is empty".into()));
        }
        let cwd = Path::new(&req.cwd);
        if !cwd.is_absolute() {
            return Err(invalid(format!(
                "working directory {:?} is not an absolute path",
                req.cwd
            )));
        }
        if let Some(name) = req.env.keys().find(|k| !launch::valid_env_name(k)) {
            return Err(invalid(format!(
                "environment variable name {name:?} is not valid (empty, or contains '=' or NUL)"
            )));
        }
        let run_as = launch::run_as(
            self.agent_uid,
            self.policy.allow_root,
            req.submitter.uid,
            req.submitter.gid,
            &req.submitter.groups,
        )
        .map_err(|refusal| match refusal {
            Refusal::Root => AgentError::Root { node },
            Refusal::NotRoot { agent } => AgentError::Permission {
                node,
                wanted: req.submitter.uid,
                agent,
            },
        })?;
        launch::check_cwd(cwd).map_err(|source| AgentError::Cwd {
            node,
            cwd: req.cwd.clone(),
            source,
        })?;
        let files = RankFiles::new(
            &req.output,
            &req.error,
            (key.job_id, key.rank),
            (node.x, node.y),
            cwd,
        )
        .map_err(|(path, source)| AgentError::OutputFile { node, path, source })?;
        let spawn_error = |source| AgentError::Spawn {
            node,
            program: argv0.clone(),
            source,
        };
        // A request with no environment runs with the default PATH: look argv[0] up there
        // too, not in the agent's own.
        let agent_path = match req.env.is_empty() {
            true => Some(launch::DEFAULT_PATH.into()),
            false => std::env::var_os("PATH"),
        };
        let path = req
            .env
            .get("PATH")
            .map(OsStr::new)
            .or(agent_path.as_deref());
        let program = launch::resolve_program(argv0, path, cwd).map_err(spawn_error)?;
        let mpi_check = crate::mpi_check::preload(self.msg.base(), &req, &self.policy.env_allow)
            .map_err(|e| spawn_error(std::io::Error::other(e)))?;

        self.ranks.reserve(key).map_err(|e| match e {
            ReserveError::Duplicate => AgentError::Duplicate {
                node,
                job_id: key.job_id,
                rank: key.rank,
            },
            ReserveError::Closing => AgentError::ShuttingDown { node },
        })?;
        let (mut env, dropped) = launch::filter_env(&req.env, &self.policy.env_allow);
        if !dropped.is_empty() {
            info!(
                job_id = key.job_id,
                rank = key.rank,
                dropped = %dropped.join(","),
                "variables dropped from the rank's environment: they make every process it starts load code or write files (the agent's env_allow keeps them)"
            );
        }
        if req.env.is_empty() {
            env = launch::default_env(&launch::Account::of(req.submitter.uid, &req.submitter.user));
        } else if launch::ACCOUNT_ENV
            .iter()
            .any(|name| !req.env.contains_key(*name))
        {
            launch::fill_account(
                &mut env,
                &launch::Account::of(req.submitter.uid, &req.submitter.user),
            );
        }
        // Failures from here on may come from the child, after it took on the user's
        // credentials: say whose they were.
        let as_user = match &run_as {
            RunAs::User { uid, .. } => Some(*uid),
            RunAs::Agent => None,
        };
        let spawn_failed = |source| match as_user {
            Some(uid) => AgentError::SpawnAs {
                node,
                program: argv0.clone(),
                uid,
                cwd: req.cwd.clone(),
                source,
            },
            None => spawn_error(source),
        };
        let msg_launch = MsgLaunch {
            key,
            uid: match &run_as {
                RunAs::User { uid, gid, .. } => Some((*uid, *gid)),
                RunAs::Agent => None,
            },
            part: req
                .part
                .map(|p| format!("{},{},{},{}", p.x, p.y, p.w, p.h))
                .unwrap_or_else(|| format!("{},{},1,1", node.x, node.y)),
            context: req.msg_context.as_str(),
        };
        let gang_env = match self.msg.prepare(&msg_launch) {
            Ok(vars) => vars,
            Err(e) => {
                self.ranks.unreserve(key);
                return Err(spawn_error(std::io::Error::other(format!(
                    "cannot set up the messaging library's directory under {}: {e}",
                    self.msg.base().display()
                ))));
            }
        };
        // PMI-1 for MPICH, unless the job said none: the agent keeps one end, the rank
        // inherits the other as PMI_FD.
        let pmi_job = crate::pmi::PmiJob {
            key,
            size: req.size,
        };
        let mut gang_env = gang_env;
        gang_env.extend(mpi_check);
        let pmi = if req.mpi == Mpi::None {
            None
        } else {
            match crate::pmi::socketpair() {
                Ok((agent_end, rank_end)) => {
                    gang_env.extend(pmi_job.env(rank_end.as_raw_fd()));
                    Some((agent_end, rank_end))
                }
                Err(e) => {
                    self.msg.remove(key);
                    self.ranks.unreserve(key);
                    return Err(spawn_error(std::io::Error::other(format!(
                        "cannot make the PMI socketpair: {e}"
                    ))));
                }
            }
        };
        // PMIx for Open MPI: the rank registered with the node's PMIx server before the
        // fork. PMI-1's socket stays too, so an MPICH program runs under `--mpi pmix`.
        if req.mpi == Mpi::Pmix {
            let refused = |what: String| {
                self.msg.remove(key);
                self.ranks.unreserve(key);
                what
            };
            if !gang_pmix::AVAILABLE {
                return Err(invalid(refused(format!(
                    "--mpi pmix: {}",
                    gang_pmix::Error::NotBuilt
                ))));
            }
            let (uid, gid) = msg_launch
                .uid
                .unwrap_or((self.agent_uid, nix::unistd::getegid().as_raw()));
            let launch = crate::pmix::PmixLaunch {
                key,
                size: req.size,
                part: req.part.map(|p| (p.x, p.y, p.w, p.h)),
                uid,
                gid,
            };
            match self.msg.pmix_prepare(&launch) {
                Ok(vars) => {
                    gang_env.extend(vars);
                    gang_env.extend(crate::pmix::open_mpi_defaults(&req.env));
                }
                Err(e) => {
                    return Err(spawn_error(std::io::Error::other(refused(format!(
                        "--mpi pmix: {e}"
                    )))));
                }
            }
        }
        let mode = req.mode;
        // A FREEZE rank gets its cgroup before the fork; the child enters it before exec.
        let mut prepared = self.switch.prepare(key, mode);
        prepared.msg = self.msg.pages(key);
        let spec = RankSpec {
            key,
            size: req.size,
            node,
            program: &program,
            argv: &req.argv,
            cwd,
            env: &env,
            gang_env: &gang_env,
            run_as,
            stdin: req.stdin,
            files,
            cgroup_procs: prepared.cgroup.as_ref().and_then(|c| c.procs_fd()),
            pmi_fd: pmi.as_ref().map(|(_, rank_end)| rank_end.as_raw_fd()),
        };
        let spawned = launch::command(&spec).and_then(|mut cmd| cmd.spawn());
        // The rank has its copy (or failed): the agent's would keep the socket open after
        // the rank exits.
        let pmi = pmi.map(|(agent_end, _rank_end)| agent_end);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                self.switch.abandon(prepared);
                self.msg.remove(key);
                self.ranks.unreserve(key);
                return Err(match spec.files.explain(&e) {
                    Some((path, source)) => AgentError::OutputFile { node, path, source },
                    None => spawn_failed(e),
                });
            }
        };
        let Some(pid) = child.id() else {
            // Only possible if the child was already reaped, which nobody else does.
            self.switch.abandon(prepared);
            self.msg.remove(key);
            self.ranks.unreserve(key);
            return Err(spawn_error(std::io::Error::other(
                "the process vanished at spawn",
            )));
        };
        // process_group(0): the rank leads its own group, whose id is its pid.
        let pgid = Pid::from_raw(pid as i32);
        let pmi = pmi.and_then(|agent_end| match crate::pmi::agent_stream(agent_end) {
            Ok(stream) => Some((stream, pmi_job)),
            Err(e) => {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    "cannot serve the rank's PMI socket: {e}"
                );
                None
            }
        });
        self.msg.started(key, pgid, pmi);
        // Managed from now on: if a table in force names its job, it is switched in step.
        self.switch.add(prepared, pgid.as_raw());
        let stdin = child.stdin.take().map(|pipe| {
            let (tx, rx) = mpsc::channel(STDIN_QUEUE);
            tokio::spawn(launch::feed_stdin(pipe, rx, key));
            tx
        });
        let pipes = Pipes {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
        };
        self.ranks.started(key, pgid, stdin);
        info!(
            job_id = key.job_id,
            rank = key.rank,
            pid,
            argv = ?req.argv,
            cwd = %req.cwd,
            "rank started"
        );
        let supervisor = Supervisor {
            node,
            ranks: Arc::clone(&self.ranks),
            outbox: Arc::clone(&self.outbox),
            switch: Arc::clone(&self.switch),
            msg: Arc::clone(&self.msg),
        };
        tokio::spawn(supervisor.supervise(key, child, pgid, pipes));
        Ok(pid)
    }

    /// SIGCONT+SIGTERM to the job's ranks here, SIGKILL after `grace`. Whether any were here.
    /// The job leaves time slicing first, and is continued (thawed, reniced), so that a
    /// switched-out rank can act on the SIGTERM.
    pub fn signal(&self, job_id: u64, grace: Duration) -> bool {
        self.switch.release_job(job_id);
        let found = self.ranks.signal_job(job_id, grace);
        if found {
            info!(
                job_id,
                grace_ms = grace.as_millis() as u64,
                "signalling job"
            );
        }
        found
    }

    /// Forward stdin data (or EOF) to the job's rank with a stdin pipe here.
    pub async fn stdin(&self, job_id: u64, data: Vec<u8>, eof: bool) -> Result<(), AgentError> {
        let tx = match self.ranks.stdin_target(job_id) {
            StdinTarget::UnknownJob => {
                return Err(AgentError::UnknownJob {
                    node: self.coord,
                    job_id,
                });
            }
            // The rank exited or never read stdin: like writing to a closed pipe, the data
            // is lost, and that is not the sender's error.
            StdinTarget::Closed => return Ok(()),
            StdinTarget::Pipe(tx) => tx,
        };
        if !data.is_empty() {
            // A send error means the writer is gone (pipe closed): not an error either.
            let _ = tx.send(StdinMsg::Data(data)).await;
        }
        if eof {
            let _ = tx.send(StdinMsg::Eof).await;
        }
        Ok(())
    }

    /// Stop every rank here the way a master-ordered kill does (`signal` with the kill
    /// grace: continued, SIGTERM, SIGKILL after the grace). Returns the jobs signalled.
    pub fn stop_all(&self) -> Vec<u64> {
        let mut jobs: Vec<u64> = self.ranks.running().iter().map(|k| k.job_id).collect();
        // Sorted by (job, rank): a job's ranks are adjacent.
        jobs.dedup();
        for &job_id in &jobs {
            self.signal(job_id, self.kill_grace);
        }
        jobs
    }

    /// Shutdown: stop switching and continue every rank (a frozen one cannot even die),
    /// SIGKILL every rank's group, and wait (bounded) until all are reaped.
    pub async fn kill_all(&self, deadline: Instant) -> bool {
        self.switch.stop_and_release_all().await;
        let running = self.ranks.running().len();
        if running > 0 {
            info!(running, "killing all ranks");
        }
        self.ranks.kill_all();
        let reaped = self.ranks.wait_none_running(deadline).await;
        if !reaped {
            warn!(
                still = ?self.ranks.running(),
                "ranks not reaped in time after {}",
                Signal::SIGKILL
            );
        }
        reaped
    }
}
