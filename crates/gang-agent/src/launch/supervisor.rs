//! A rank's supervisor: owns the child from spawn to exit report. It reads the rank's
//! pipes into the outbox, reaps the child (a stopped rank is never reported: `Child::wait`
//! only returns on exit), sweeps its group, drains its output, then queues the exit
//! behind that output.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{RankExit, Stream};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::command::Pipes;
use crate::error::Coord;
use crate::launch::usage::{RankUsage, Usage as Used};
use crate::msg::MsgHub;
use crate::output::{Outbox, pump};
use crate::ranks::{RankKey, Ranks, signal_group};
use crate::switch::Switcher;

/// How long an exited rank's pipes may stay open (held by a process that escaped its
/// group) before the agent stops reading them and reports the exit anyway.
pub const PIPE_DRAIN: Duration = Duration::from_secs(2);

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
    pub async fn supervise(
        self,
        key: RankKey,
        child: Child,
        pgid: Pid,
        pipes: Pipes,
        usage: Option<RankUsage>,
    ) {
        let (mut pumps, terminal) = self.start_pumps(key, pipes);
        let how = self.reap(key, child, pgid).await;
        // Reaped: its terminal may hang up now (what is left of its session gets SIGHUP,
        // then the sweep's SIGKILL).
        drop(terminal);
        let abort = self.msg.pmi_finished(key).await;
        // Ended by the agent on its PMI abort: reported with the code the rank gave.
        let how = match &abort {
            Some(a) => How::Code(a.code),
            None => how,
        };
        let abort = abort.map(|a| a.what);
        let used = self.sweep(key, pgid, usage);
        drain(key, &mut pumps).await;
        info!(job_id = key.job_id, rank = key.rank, ?how, "rank exited");
        self.outbox.push_exit(RankExit {
            job_id: key.job_id,
            rank: key.rank,
            x: self.node.x,
            y: self.node.y,
            how: Some(how),
            abort,
            cpu_user_ns: used.cpu_user_ns,
            cpu_system_ns: used.cpu_system_ns,
            mem_peak_bytes: used.mem_peak_bytes,
            // The outbox fills in what the rank produced.
            ..Default::default()
        });
    }

    /// Read both pipes (or the terminal) concurrently: a rank blocked writing a full
    /// stderr pipe while we wait on its stdout would never finish. Also what keeps a
    /// rank's terminal up until it is reaped.
    fn start_pumps(
        &self,
        key: RankKey,
        pipes: Pipes,
    ) -> (Vec<JoinHandle<()>>, Option<std::os::fd::OwnedFd>) {
        let mut pumps: Vec<JoinHandle<()>> = Vec::with_capacity(2);
        if let Some(pipe) = pipes.stdout {
            let outbox = Arc::clone(&self.outbox);
            pumps.push(tokio::spawn(async move {
                pump(pipe, key, Stream::Stdout, &outbox).await;
            }));
        }
        let mut terminal = None;
        if let Some(pty) = pipes.pty {
            let outbox = Arc::clone(&self.outbox);
            pumps.push(tokio::spawn(async move {
                pump(pty.reader, key, Stream::Stdout, &outbox).await;
            }));
            terminal = Some(pty.keep);
        }
        if let Some(pipe) = pipes.stderr {
            let outbox = Arc::clone(&self.outbox);
            pumps.push(tokio::spawn(async move {
                pump(pipe, key, Stream::Stderr, &outbox).await;
            }));
        }
        (pumps, terminal)
    }

    /// Wait for the rank's exit; should the wait itself fail, kill its group and wait
    /// again, so that the child is gone and reaped before moving on.
    async fn reap(&self, key: RankKey, mut child: Child, pgid: Pid) -> How {
        match child.wait().await {
            Ok(status) => how_of(status),
            Err(e) => {
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
        }
    }

    /// Forget the ended rank, kill what is left of its group and read what it used.
    fn sweep(&self, key: RankKey, pgid: Pid, usage: Option<RankUsage>) -> Used {
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
        // After the sweep: what leftovers used until they were killed counts too.
        let used = usage.as_ref().map(RankUsage::read).unwrap_or_default();
        if let Some(u) = usage {
            tokio::spawn(u.remove());
        }
        used
    }
}

/// Wait for the output readers, at most `PIPE_DRAIN`; then abort them and wait until they
/// are gone, so that nothing of theirs can be queued after the exit.
async fn drain(key: RankKey, pumps: &mut [JoinHandle<()>]) {
    let drained = tokio::time::timeout(PIPE_DRAIN, async {
        for p in pumps.iter_mut() {
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
        for p in pumps.iter() {
            p.abort();
        }
        for p in pumps.iter_mut() {
            let _ = p.await;
        }
    }
}
