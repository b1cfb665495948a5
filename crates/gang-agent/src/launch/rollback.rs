//! The side effects of a launch, under one guard. `take` reserves the (job, rank) and
//! takes what the rank needs, recording each step in the guard; whatever fails from
//! then on, until the rank is handed to its supervisor, dropping the guard gives back
//! exactly what was taken, newest first. `commit` hands it all on instead: from then on
//! the rank's supervisor gives it back when the rank is reaped.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use tokio::net::UnixStream;
use tracing::{info, warn};

use super::command::{Given, Spawned};
use super::failure::Failure;
use super::mpi::MpiPlan;
use super::parts::NodeParts;
use super::plan::LaunchPlan;
use super::supervisor::Supervisor;
use crate::launch::usage::RankUsage;
use crate::mpi::pmi::PmiJob;
use crate::ranks::RankKey;
use crate::switch::Prepared;

/// What the launch holds. The messaging directory and the PMIx registration are
/// recorded as soon as they are tried: their undo takes away whatever of them a failure
/// left.
pub struct Rollback<'a> {
    parts: &'a NodeParts,
    key: RankKey,
    msg: bool,
    pmix: bool,
    switch: Option<Prepared>,
    /// The agent's end of the rank's PMI socket, to serve once the rank runs.
    pmi: Option<(UnixStream, PmiJob)>,
    /// Its accounting cgroups, if this node has them.
    usage: Option<RankUsage>,
    /// Cleared by `commit`.
    armed: bool,
}

impl<'a> Rollback<'a> {
    /// Reserve the rank (a Signal for its job from now on is held until it runs), then
    /// take, in order: its messaging directory, the MPI servers `mpi` gives it (its PMI
    /// socketpair, its PMIx registration) and its place in the switcher (a FREEZE rank's
    /// cgroup, made before the fork).
    pub async fn take(
        plan: &LaunchPlan,
        parts: &'a NodeParts,
        mpi: &MpiPlan,
        preload: Option<(String, String)>,
    ) -> Result<(Self, Given), Failure> {
        let key = plan.req.key;
        parts.ranks.reserve(key).map_err(Failure::Reserve)?;
        let mut taken = Rollback {
            parts,
            key,
            msg: false,
            pmix: false,
            switch: None,
            pmi: None,
            usage: None,
            armed: true,
        };
        taken.msg = true;
        let (mut gang_env, state_fd) = parts.msg.prepare(&plan.msg).map_err(|e| {
            Failure::Start(io::Error::other(format!(
                "cannot set up the messaging library's directory under {}: {e}",
                parts.msg.base().display()
            )))
        })?;
        gang_env.extend(preload);
        gang_env.extend(allocation_env(&plan.req));
        // PMI-1 for MPICH, unless the job said none: the agent keeps one end, the rank
        // inherits the other as PMI_FD.
        let pmi_fd = match &mpi.pmi {
            Some(job) => {
                let (agent_end, rank_end) = crate::mpi::pmi::socketpair().map_err(|e| {
                    Failure::Start(io::Error::other(format!(
                        "cannot make the PMI socketpair: {e}"
                    )))
                })?;
                gang_env.extend(job.env(rank_end.as_raw_fd()));
                taken.pmi = serve_pmi(job, agent_end).map(|stream| (stream, job.clone()));
                Some(rank_end)
            }
            None => None,
        };
        // PMIx for Open MPI, registered before the fork. PMI-1's socket stays too, so an
        // MPICH program runs under `--mpi pmix`.
        if let Some(pmix) = &mpi.pmix {
            taken.pmix = true;
            match parts.msg.pmix_prepare(&pmix.launch).await {
                Ok(vars) => {
                    gang_env.extend(vars);
                    // After the library's own (it lists every module it has) and over
                    // the job's: the one module the gate checks.
                    gang_env.extend(gang_pmix::client_security_env());
                    gang_env.extend(pmix.open_mpi.iter().cloned());
                }
                Err(e) if !pmix.required => warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    "--mpi {}: the rank runs without PMIx (an Open MPI program it starts runs as a singleton): {e}",
                    plan.req.mpi.name()
                ),
                Err(e) => {
                    return Err(Failure::Start(io::Error::other(format!(
                        "--mpi {}: {e}",
                        plan.req.mpi.name()
                    ))));
                }
            }
        }
        let mut prepared = parts
            .switch
            .prepare(key, plan.req.mode, plan.req.slot_job());
        prepared.msg = parts.msg.pages(key);
        let cgroup_procs = prepared.cgroup.as_ref().and_then(|c| c.procs_fd());
        taken.switch = Some(prepared);
        // Not measured rather than not run: a rank whose cgroups cannot be made still runs.
        taken.usage = parts.usage.base().and_then(|b| {
            b.create(key)
                .inspect_err(|e| {
                    warn!(
                        job_id = key.job_id,
                        rank = key.rank,
                        "no accounting cgroup, its CPU time and memory go unmeasured: {e}"
                    )
                })
                .ok()
        });
        let usage_procs = taken
            .usage
            .as_ref()
            .map(RankUsage::procs_fds)
            .unwrap_or_default();
        let given = Given {
            gang_env,
            pmi_fd,
            state_fd,
            cgroup_procs,
            usage_procs,
        };
        Ok((taken, given))
    }

    /// The rank runs: its MPI servers may end it on an abort (and serve its PMI socket),
    /// the switcher manages it if a table in force names its job, the registry
    /// counts it running (and applies a Signal that came while it started), and its
    /// supervisor owns it until its exit is reported. Returns its pid.
    pub fn commit(mut self, plan: &LaunchPlan, spawned: Spawned) -> u32 {
        self.armed = false;
        let parts = self.parts;
        let Spawned {
            child,
            pid,
            pgid,
            stdin,
            pipes,
        } = spawned;
        parts.msg.started(self.key, pgid, self.pmi.take());
        if let Some(prepared) = self.switch.take() {
            parts.switch.add(prepared, pgid.as_raw());
        }
        parts.ranks.started(self.key, pgid, stdin);
        info!(
            job_id = self.key.job_id,
            rank = self.key.rank,
            pid,
            argv = ?plan.req.argv,
            cwd = %plan.req.cwd,
            "rank started"
        );
        let supervisor = Supervisor {
            node: parts.facts.node,
            ranks: Arc::clone(&parts.ranks),
            outbox: Arc::clone(&parts.outbox),
            switch: Arc::clone(&parts.switch),
            msg: Arc::clone(&parts.msg),
        };
        let mut usage = self.usage.take();
        if let Some(u) = &mut usage {
            u.spawned();
        }
        tokio::spawn(supervisor.supervise(self.key, child, pgid, pipes, usage));
        pid
    }
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let parts = self.parts;
        if let Some(prepared) = self.switch.take() {
            parts.switch.abandon(prepared);
        }
        if let Some(u) = self.usage.take() {
            u.remove_now();
        }
        if self.pmix {
            parts.msg.pmix_remove(self.key);
        }
        if self.msg {
            parts.msg.remove(self.key);
        }
        parts.ranks.unreserve(self.key);
    }
}

/// The agent's end of the rank's PMI socketpair, ready to serve; None (the rank runs
/// without a PMI server) if it cannot be.
fn serve_pmi(job: &PmiJob, agent_end: OwnedFd) -> Option<UnixStream> {
    crate::mpi::pmi::agent_stream(agent_end)
        .inspect_err(|e| {
            warn!(
                job_id = job.key.job_id,
                rank = job.key.rank,
                "cannot serve the rank's PMI socket: {e}"
            )
        })
        .ok()
}

/// What prun inside an allocation needs to start steps in it: the allocation's id (in its
/// batch script and in its steps' ranks, as Slurm's SLURM_JOB_ID), and in the script the
/// master address its submitter used (the job's own GANG_* are not passed on otherwise).
fn allocation_env(req: &crate::request::RankRequest) -> Vec<(String, String)> {
    if req.allocation == 0 {
        return Vec::new();
    }
    let mut env = vec![("GANG_ALLOCATION_ID".to_owned(), req.allocation.to_string())];
    if req.allocation == req.key.job_id
        && let Some(master) = req.env.get("GANG_MASTER")
    {
        env.push(("GANG_MASTER".to_owned(), master.clone()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::allocation_env;
    use crate::ranks::RankKey;
    use crate::request::RankRequest;

    fn req(job_id: u64, allocation: u64) -> RankRequest {
        RankRequest {
            key: RankKey { job_id, rank: 0 },
            allocation,
            env: [("GANG_MASTER".to_string(), "unix:/m.sock".to_string())].into(),
            ..RankRequest::default()
        }
    }

    #[test]
    fn a_batch_script_learns_its_allocation_and_master_a_step_its_allocation() {
        let env = |r: RankRequest| allocation_env(&r);
        assert_eq!(
            env(req(12, 12)),
            [
                ("GANG_ALLOCATION_ID".to_string(), "12".to_string()),
                ("GANG_MASTER".to_string(), "unix:/m.sock".to_string())
            ]
        );
        assert_eq!(
            env(req(13, 12)),
            [("GANG_ALLOCATION_ID".to_string(), "12".to_string())]
        );
        assert!(env(req(13, 0)).is_empty());
    }
}
