//! The node: what the NodeAgent service and the registry session act on. It owns the rank
//! registry and the outbox, and implements Launch, Signal and Stdin in domain terms (the
//! gRPC adapter in `service.rs` only converts).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gang_proto::v1::LaunchRequest;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::{AgentError, Coord};
use crate::launch::{self, Pipes, RankSpec};
use crate::output::Outbox;
use crate::ranks::{RankKey, Ranks, ReserveError, StdinMsg, StdinTarget};

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
    agent_uid: u32,
}

impl Node {
    pub fn new(coord: Coord, kill_grace: Duration) -> Arc<Self> {
        Self::with_outbox(coord, kill_grace, Arc::new(Outbox::new()))
    }

    pub fn with_outbox(coord: Coord, kill_grace: Duration, outbox: Arc<Outbox>) -> Arc<Self> {
        Arc::new(Node {
            coord,
            ranks: Ranks::new(),
            outbox,
            kill_grace,
            agent_uid: nix::unistd::geteuid().as_raw(),
        })
    }

    /// Start one rank; returns its pid. Must run in a task on a runtime worker thread
    /// (see `launch::command`).
    pub fn launch(self: &Arc<Self>, req: LaunchRequest) -> Result<u32, AgentError> {
        let node = self.coord;
        let invalid = |what: String| AgentError::InvalidArgument { node, what };
        let key = RankKey {
            job_id: req.job_id,
            rank: req.rank,
        };
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
        let run_as = launch::run_as(self.agent_uid, req.uid, req.gid).map_err(|agent| {
            AgentError::Permission {
                node,
                wanted: req.uid,
                agent,
            }
        })?;
        launch::check_cwd(cwd).map_err(|source| AgentError::Cwd {
            node,
            cwd: req.cwd.clone(),
            source,
        })?;
        let spawn_error = |source| AgentError::Spawn {
            node,
            program: argv0.clone(),
            source,
        };
        let agent_path = std::env::var_os("PATH");
        let path = req
            .env
            .get("PATH")
            .map(OsStr::new)
            .or(agent_path.as_deref());
        let program = launch::resolve_program(argv0, path, cwd).map_err(spawn_error)?;

        self.ranks.reserve(key).map_err(|e| match e {
            ReserveError::Duplicate => AgentError::Duplicate {
                node,
                job_id: key.job_id,
                rank: key.rank,
            },
            ReserveError::Closing => AgentError::ShuttingDown { node },
        })?;
        let spec = RankSpec {
            key,
            size: req.size,
            node,
            program: &program,
            argv: &req.argv,
            cwd,
            env: &req.env,
            run_as,
            stdin: req.stdin,
        };
        let mut child = match launch::command(&spec).spawn() {
            Ok(child) => child,
            Err(e) => {
                self.ranks.unreserve(key);
                return Err(spawn_error(e));
            }
        };
        let Some(pid) = child.id() else {
            // Only possible if the child was already reaped, which nobody else does.
            self.ranks.unreserve(key);
            return Err(spawn_error(std::io::Error::other(
                "the process vanished at spawn",
            )));
        };
        // process_group(0): the rank leads its own group, whose id is its pid.
        let pgid = Pid::from_raw(pid as i32);
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
        tokio::spawn(launch::supervise(Arc::clone(self), key, child, pgid, pipes));
        Ok(pid)
    }

    /// SIGCONT+SIGTERM to the job's ranks here, SIGKILL after `grace`. Whether any were here.
    pub fn signal(&self, job_id: u64, grace: Duration) -> bool {
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

    /// Shutdown: SIGKILL every rank's group, and wait (bounded) until all are reaped.
    pub async fn kill_all(&self, deadline: Instant) -> bool {
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
