//! The master's events, one function each, in the shape of HyperQueue's tako reactor: the
//! state, the way out ([`Effects`]) and the instant ([`Now`]) are passed in; nothing here
//! reads a clock or touches the network or the disk. Each runs inside a round
//! (`round::run`).
//!
//! | event | from |
//! |---|---|
//! | [`on_recover`] | the database, at startup |
//! | [`on_submit`], [`on_cancel`], [`on_update`] | clients (JobService) |
//! | [`on_set_drained`] | admins (AdminService) |
//! | [`on_register`], [`on_heartbeat`], [`on_rank_exits`], [`on_fence`] | agents (AgentRegistry) |
//! | [`on_launches`], [`on_table_acked`], [`on_table_lost`] | the outcome of an effect |
//! | [`on_tick`] | a timer, every 100 ms |
//! | [`end_round`] | `round::run`, after each round |
//!
//! Queries (`MasterState::view`, `list`, `nodes_view`, `matrix_view`, ...) change nothing.
//!
//! What each event decides is in the module of its subject: `submit`, `launch`, `end`,
//! `update`, `nodes` (registration, heartbeats, timeouts, drain), `messaging` (activity,
//! deadlocks, fences), `tables` (slice tables, run time), `recovery` (a restarted master);
//! the policies a queued job meets are `state::policy`.

mod end;
mod launch;
mod liveness_tree;
pub(in crate::state) mod messaging;
pub(in crate::state) mod nodes;
mod recovery;
mod submit;
mod tables;
mod update;

pub use end::TIMEOUT_EXIT;
pub use liveness_tree::{BeatAnswer, Link, on_beats};
pub use nodes::{on_heartbeat, on_register, on_set_drained};
pub use recovery::{Recovered, on_recover};
pub use submit::on_submit;
pub use update::on_update;

use gang_core::JobId;

use crate::error::Result;
use crate::state::effects::{Coord, Effects};
use crate::state::events::{Caller, FenceArrival, LaunchFailure, RankExit};
use crate::state::views::JobView;
use crate::state::{MasterState, Now};

/// The job's owner or an admin may cancel it.
pub fn on_cancel(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    job: JobId,
    caller: &Caller,
) -> Result<JobView> {
    let why = format!("cancelled by {}", caller.owner.user);
    st.cancel(fx, now, job, Some(caller), why)
}

pub fn on_rank_exit(st: &mut MasterState, fx: &mut Effects, now: Now, exit: RankExit) {
    on_rank_exits(st, fx, now, vec![exit])
}

/// Exit reports that came together (an agent's batch, or a relayed subtree's): each job
/// they touch is saved once.
pub fn on_rank_exits(st: &mut MasterState, fx: &mut Effects, now: Now, exits: Vec<RankExit>) {
    for exit in &exits {
        st.heard(exit.node, now);
    }
    st.rank_exits(fx, now, exits)
}

/// A launch finished: the rank's pid, or why it did not start.
pub fn on_launched(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    job: JobId,
    rank: u32,
    result: std::result::Result<u32, LaunchFailure>,
) {
    on_launches(st, fx, now, job, &[(rank, result)])
}

/// Launches of one job that were answered together (a relayed order's outcome): whether
/// the job now runs is asked once, not once a rank.
pub fn on_launches(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    job: JobId,
    results: &[(u32, std::result::Result<u32, LaunchFailure>)],
) {
    for (rank, result) in results {
        match result {
            Ok(_) => st.heard_from_rank(job, *rank, now),
            // Not heard: judged by the node timeout from now on, idle or not.
            Err(LaunchFailure::Unreachable { node, .. }) => st.unreachable(*node),
            Err(LaunchFailure::Refused(_)) => {}
        }
        st.launched(fx, now, job, *rank, result);
    }
    st.note_started(fx, now, job);
}

pub fn on_table_acked(st: &mut MasterState, now: Now, node: Coord, version: u64) {
    st.heard(node, now);
    st.table_acked(node, version)
}

/// A slice table was not delivered (the call or its relay failed).
pub fn on_table_lost(st: &mut MasterState, node: Coord, version: u64) {
    st.table_lost(node, version)
}

/// A rank of a job arrives at a fence: `Some(space)` answers it now; `None`: it waits,
/// and is answered with the others by `Effect::FenceDone` once every rank arrived.
pub fn on_fence(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    arrival: FenceArrival,
) -> Result<Option<std::sync::Arc<crate::msg_jobs::Space>>> {
    st.heard(arrival.node, now);
    st.fence(fx, arrival)
}

/// Periodic: node timeouts, ranks lost across a restart, run time and time limits, and
/// the deadlock check of jobs whose ranks all reported since the last one.
pub fn on_tick(st: &mut MasterState, fx: &mut Effects, now: Now) {
    st.node_timeouts(fx, now);
    st.adoption_timeouts(fx, now);
    st.run_time_tick(fx, now);
    st.deadlock_checks(fx, now);
}

/// After every round: held and dependent jobs whose gate opened are queued (or ended, if
/// a dependency can never hold), then a new slice table if the matrix's rows changed.
pub fn end_round(st: &mut MasterState, fx: &mut Effects, now: Now) {
    st.admit_ready(fx, now);
    st.admit_waiting_steps(fx, now);
    st.publish_table(fx, now)
}
