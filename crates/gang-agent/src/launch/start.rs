//! Carrying out a launch plan, one way: look up what it needs (nothing taken yet; its
//! program decides its MPI), take the rank's resources under a `Rollback`, spawn, and
//! commit, which hands the rank to its supervisor. A failure at any step drops the guard, which gives back what was
//! taken, and is worded into the error the master sees.

use super::command::spawn_rank;
use super::failure::Failure;
use super::lookup::look_up;
use super::parts::NodeParts;
use super::plan::LaunchPlan;
use super::rollback::Rollback;
use crate::error::AgentError;

/// Start the planned rank; its pid. Must run in a task on a runtime worker thread (see
/// `command::command`): it awaits only the PMIx registration (answered by the PMIx
/// server's own thread, within its timeout), and forks on a worker thread after it.
pub async fn start(plan: LaunchPlan, parts: &NodeParts) -> Result<u32, AgentError> {
    carry_out(&plan, parts)
        .await
        .map_err(|failure| failure.word(&plan))
}

async fn carry_out(plan: &LaunchPlan, parts: &NodeParts) -> Result<u32, Failure> {
    let mut found = look_up(plan, parts.msg.base(), &parts.facts)?;
    let (taken, given) = Rollback::take(plan, parts, &found.mpi, found.preload.take()).await?;
    let spawned = spawn_rank(plan, &parts.facts.policy.env_allow, found, given)?;
    Ok(taken.commit(plan, spawned))
}
