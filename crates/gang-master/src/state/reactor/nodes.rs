//! Node liveness: registration, heartbeats, timeouts, drain, and what each implies for the
//! ranks believed to run there.

use gang_core::JobId;
use tracing::{info, warn};

use crate::config::liveness_scale;
use crate::error::{MasterError, Result};
use crate::job::Rank;
use crate::state::effects::{Coord, Effect, Effects, Save};
use crate::state::events::{Caller, Heartbeat, Registered, Registration};
use crate::state::views::NodeView;
use crate::state::{MasterState, Now};

/// A table neither acknowledged nor reported lost this long after it went is sent again
/// (to an agent whose beats show it behind), this long per started 1,024 nodes of the
/// mesh (`liveness_scale`, as the heartbeat period and the node timeout). A relayed table
/// is on its way for as long as its tree takes, seconds on a loaded host at 1,024 nodes
/// and tens of seconds at 10,000: sending it again sooner doubles the work that made it
/// slow (at 10,000 emulated nodes, one direct call and one TLS handshake each, 40 % of
/// the master's CPU during launches). A lost one is sent again at the next beat.
const TABLE_RESEND_NS: i64 = 5_000_000_000;

impl MasterState {
    pub(in crate::state) fn unknown_node(&self, (x, y): Coord) -> MasterError {
        MasterError::UnknownNode {
            x,
            y,
            w: self.cfg.mesh.w,
            h: self.cfg.mesh.h,
        }
    }

    pub(in crate::state) fn table_acked(&mut self, node: Coord, version: u64) {
        if let Some(i) = self.node_index(node) {
            let n = &mut self.nodes[i];
            n.table_version = n.table_version.max(version);
        }
    }

    /// The table of `version` did not reach the agent of `node`: the next beat that shows
    /// it behind sends it again.
    pub(in crate::state) fn table_lost(&mut self, node: Coord, version: u64) {
        if let Some(i) = self.node_index(node) {
            let n = &mut self.nodes[i];
            if n.table_sent.is_some_and(|(v, _)| v == version) {
                n.table_sent = None;
            }
        }
    }

    /// Any call of the agent of `node` shows it alive, as a heartbeat does.
    pub(in crate::state) fn heard(&mut self, node: Coord, now: Now) {
        if let Some(i) = self.node_index(node) {
            let n = &mut self.nodes[i];
            n.heard_live_ns = n.heard_live_ns.max(now.live_ns);
            n.unreachable = false;
        }
    }

    /// A call to the agent of `node` could not reach it: until it is heard from again,
    /// its silence is judged by the node timeout even while it runs nothing (quiet
    /// liveness does not hide an agent known to be gone).
    pub(in crate::state) fn unreachable(&mut self, node: Coord) {
        if let Some(i) = self.node_index(node) {
            self.nodes[i].unreachable = true;
        }
    }

    /// The agent of the node that runs `rank` of `job` answered.
    pub(in crate::state) fn heard_from_rank(&mut self, job: JobId, rank: u32, now: Now) {
        if let Some(node) = self.jobs.get(job).and_then(|j| j.node_of(rank)) {
            self.heard(node, now);
        }
    }

    /// For each node that runs ranks (of a live job, not yet ended there): when the
    /// latest of those jobs was placed (live clock; `i64::MIN` if that is no longer
    /// recorded), or `i64::MAX` while a launch to it is unanswered: a whole-mesh launch can
    /// take the master longer than the node timeout to send, and its answer (or failure)
    /// settles the node's fate.
    fn busy_since(&self) -> Vec<Option<i64>> {
        let mut busy = vec![None; self.nodes.len()];
        for job in self.jobs.live() {
            let placed = self.placed_at.get(&job.id()).map(|p| p.live_ns);
            for (rank, state) in job.ranks.iter().enumerate() {
                if state.is_done() {
                    continue;
                }
                let placed = match (placed, state) {
                    (Some(_), Rank::Pending) => i64::MAX,
                    (Some(t), _) => t,
                    (None, _) => i64::MIN,
                };
                let Some(i) = job.node_of(rank as u32).and_then(|c| self.node_index(c)) else {
                    continue;
                };
                let b: &mut Option<i64> = &mut busy[i];
                *b = Some(b.map_or(placed, |t| t.max(placed)));
            }
        }
        busy
    }

    /// The two latest times up nodes were heard from (live clock).
    pub(in crate::state) fn hearing(&self) -> Hearing {
        let mut h = Hearing {
            latest: None,
            second: None,
        };
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.up {
                continue;
            }
            let t = n.heard_live_ns;
            match h.latest {
                Some((l, _)) if t <= l => h.second = Some(h.second.map_or(t, |s| s.max(t))),
                _ => {
                    h.second = h.latest.map(|(l, _)| l);
                    h.latest = Some((t, i));
                }
            }
        }
        h
    }

    /// Whether a silence since `since` (live clock), overdue at `due`, is the node's own
    /// (`node`: its index, None for a node that is not up) and not the master's: another
    /// node was heard since it fell due, so the master was listening and hearing others;
    /// or the silence outlasted the agents' lease (an agent stops its ranks by then,
    /// whoever was cut off); or, for a node that is up, no other node is up to compare it
    /// with. All nodes silent together says more about the master (its network, its host)
    /// than about them.
    pub(in crate::state) fn silence_is_its_own(
        &self,
        hearing: &Hearing,
        node: Option<usize>,
        (since, due): (i64, i64),
        now: Now,
    ) -> bool {
        let lease_ns = i64::from(self.cfg.agent_lease_ms) * 1_000_000;
        if now.live_ns - since > lease_ns {
            return true;
        }
        match hearing.latest_other(node) {
            Some(t) => t >= due,
            None => node.is_some(),
        }
    }

    /// Silent agents: their nodes go down and the ranks there are lost. A node that runs
    /// ranks is overdue after `node_timeout_ms` of silence, counted from its last call or
    /// from its latest placement, whichever is later (an idle agent heartbeats seldom, and
    /// was not expected to have been heard from lately when it was given work); a node
    /// that runs none after `idle_node_timeout_ms`. Silence is counted on the master's
    /// responsive time, and an overdue node is down only once its silence is its own
    /// (`silence_is_its_own`).
    ///
    /// A node that is down is offline: nothing is placed on it until its agent registers
    /// again, and registration tells it to kill the ranks of the jobs that ended meanwhile.
    /// So a partitioned agent, which keeps its ranks for its lease, never shares its node
    /// with a job placed after it was given up.
    pub(in crate::state) fn node_timeouts(&mut self, fx: &mut Effects, now: Now) {
        let busy_ns = i64::from(self.cfg.node_timeout_ms) * 1_000_000;
        let idle_ns = i64::from(self.cfg.idle_node_timeout_ms) * 1_000_000;
        // A walk over every node once a tenth of the node timeout, not every tick: a
        // silent node is found at most that much later, and 10,000 nodes are not walked
        // ten times a second.
        if now.live_ns.saturating_sub(self.timeouts_walked_ns) < busy_ns / 10 {
            return;
        }
        self.timeouts_walked_ns = now.live_ns;
        // Worked out only when some node is silent past the shorter limit.
        let mut busy: Option<Vec<Option<i64>>> = None;
        let mut hearing: Option<Hearing> = None;
        for i in 0..self.nodes.len() {
            let heard = self.nodes[i].heard_live_ns;
            if !self.nodes[i].up || now.live_ns - heard <= busy_ns {
                continue;
            }
            let placed = busy.get_or_insert_with(|| self.busy_since())[i];
            let (since, limit) = match placed {
                Some(placed) => (heard.max(placed), busy_ns),
                None if self.nodes[i].unreachable => (heard, busy_ns),
                None => (heard, idle_ns),
            };
            if now.live_ns - since <= limit {
                continue;
            }
            let hearing = hearing.get_or_insert_with(|| self.hearing());
            if !self.silence_is_its_own(hearing, Some(i), (since, since.saturating_add(limit)), now)
            {
                continue;
            }
            let (x, y) = self.coord(i);
            warn!(node = %format!("{x},{y}"), busy = placed.is_some(), "agent silent: node down");
            self.nodes[i].up = false;
            self.liveness_tree = None;
            if let Ok(plan) = self.sched_mut().set_node_offline(now.mono_s(), x, y, true) {
                self.execute(fx, now, plan);
            }
            let hit: Vec<(JobId, u32)> = self
                .jobs
                .live()
                .filter_map(|j| {
                    let r = j.rank_on(x, y)?;
                    j.ranks
                        .get(r as usize)
                        .is_some_and(|s| !s.is_done())
                        .then(|| (j.id(), r))
                })
                .collect();
            let ms = limit / 1_000_000;
            for (id, rank) in hit {
                let why = format!(
                    "node ({x},{y}) lost: its agent was silent for {ms} ms while the master heard others"
                );
                self.rank_gone(fx, now, id, rank, why);
            }
        }
    }

    /// Tell the agent of `node` to stop a job's ranks there.
    pub(in crate::state) fn signal_node(
        &self,
        fx: &mut Effects,
        id: JobId,
        node: Coord,
        grace_ms: u32,
    ) {
        let Some(addr) = self
            .node_index(node)
            .and_then(|i| self.nodes[i].address.as_deref())
        else {
            return;
        };
        fx.emit(Effect::Signal {
            node,
            address: addr.to_string(),
            job: id,
            grace_ms,
        });
    }
}

/// The two latest times up nodes were heard from, so that "was another node heard since"
/// costs one comparison a node.
#[derive(Debug, Clone, Copy)]
pub(in crate::state) struct Hearing {
    /// The latest, and which node.
    latest: Option<(i64, usize)>,
    /// The latest of any other node.
    second: Option<i64>,
}

impl Hearing {
    /// The latest time a node other than `node` was heard (any node for None).
    fn latest_other(&self, node: Option<usize>) -> Option<i64> {
        match self.latest {
            Some((_, i)) if Some(i) == node => self.second,
            l => l.map(|(t, _)| t),
        }
    }
}

pub fn on_set_drained(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    node: Coord,
    drained: bool,
    by: &Caller,
) -> Result<NodeView> {
    if !by.admin {
        return Err(MasterError::AdminOnly {
            caller: by.owner.user.clone(),
            action: if drained {
                "drain nodes"
            } else {
                "resume nodes"
            },
        });
    }
    let i = st.node_index(node).ok_or_else(|| st.unknown_node(node))?;
    fx.emit(Effect::Save(Save::Drained { node, drained }));
    st.nodes[i].drained = drained;
    let offline = drained || !st.nodes[i].up;
    let plan = st
        .sched_mut()
        .set_node_offline(now.mono_s(), node.0, node.1, offline)?;
    st.execute(fx, now, plan);
    Ok(st.node_view(i))
}

pub fn on_register(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    reg: Registration,
) -> Result<Registered> {
    let (x, y) = reg.node;
    let i = st
        .node_index(reg.node)
        .ok_or_else(|| st.unknown_node(reg.node))?;
    let node = &mut st.nodes[i];
    let was_up = node.up;
    node.address = Some(reg.address.clone());
    node.up = true;
    st.liveness_tree = None;
    node.heard_live_ns = now.live_ns;
    node.heartbeat_wall_ns = now.wall_ns;
    node.unreachable = false;
    let drained = node.drained;
    info!(node = %format!("{x},{y}"), address = %reg.address, was_up, "agent registered");
    // Ranks the agent still runs: known running jobs get them back; others are killed.
    let mut kill_jobs = vec![];
    for &(id, rank) in &reg.running {
        let ours = st
            .jobs
            .get(id)
            .is_some_and(|j| !j.record.state().is_final() && j.rank_on(x, y) == Some(rank));
        if !ours {
            kill_jobs.push(id);
            continue;
        }
        st.rank_running(fx, id, rank);
        let job = st.jobs.get(id).expect("checked above");
        // Counted lost while the node was away, or the job is being torn down (it
        // failed or was cancelled, perhaps before a master restart).
        let doomed = job.ranks.get(rank as usize).is_some_and(|s| s.is_done())
            || job.failure.is_some()
            || job.cancelled.is_some();
        st.note_started(fx, now, id);
        if doomed {
            kill_jobs.push(id);
        }
    }
    // Ranks believed running here that the agent does not list: it restarted (its ranks
    // died with it) or they exited and the report is still on its way. Give them the
    // node timeout, then count them lost (this agent is here: nothing to wait for).
    let missing: Vec<(JobId, u32)> = st
        .jobs
        .live()
        .filter_map(|j| {
            let rank = j.rank_on(x, y)?;
            (j.ranks.get(rank as usize) == Some(&Rank::Running)
                && !reg.running.contains(&(j.id(), rank)))
            .then(|| (j.id(), rank))
        })
        .collect();
    for (id, rank) in missing {
        if let Some(job) = st.jobs.get_mut(id) {
            job.ranks[rank as usize] = Rank::Pending;
        }
        let due = now.live_ns + i64::from(st.cfg.node_timeout_ms) * 1_000_000;
        st.adopted.entry(id).or_insert((now.live_ns, due));
    }
    if !drained {
        let plan = st.sched_mut().set_node_offline(now.mono_s(), x, y, false)?;
        st.execute(fx, now, plan);
    }
    // A new table for the changes above goes out after the round; this one brings the
    // agent up to date now (it may have missed tables while away).
    st.nodes[i].table_version = 0;
    st.send_table(fx, now, i);
    Ok(Registered {
        mesh_w: st.cfg.mesh.w,
        mesh_h: st.cfg.mesh.h,
        heartbeat_ms: st.cfg.heartbeat_ms,
        kill_jobs,
        node_timeout_ms: st.cfg.node_timeout_ms,
        agent_lease_ms: st.cfg.agent_lease_ms,
        idle_heartbeat_ms: st.cfg.idle_heartbeat_ms,
        idle_node_timeout_ms: st.cfg.idle_node_timeout_ms,
        clock_probe_max_ms: st.cfg.clock_probe_max_ms,
    })
}

/// Whether the master knows the agent (false: it must register again).
pub fn on_heartbeat(st: &mut MasterState, fx: &mut Effects, now: Now, hb: Heartbeat) -> bool {
    on_heartbeat_heard(st, fx, now, hb, 0)
}

/// A heartbeat the agent sent `age_ns` ago (through its liveness head): the node counts as
/// heard then, never later than a newer call of its own.
pub(in crate::state) fn on_heartbeat_heard(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    hb: Heartbeat,
    age_ns: i64,
) -> bool {
    let Some(i) = st.node_index(hb.node).filter(|&i| st.nodes[i].up) else {
        return false;
    };
    let n = &mut st.nodes[i];
    n.heard_live_ns = n.heard_live_ns.max(now.live_ns - age_ns);
    n.heartbeat_wall_ns = n.heartbeat_wall_ns.max(now.wall_ns - age_ns);
    n.unreachable = false;
    n.clock = hb.clock;
    // A beat that waited at its head may predate a table the agent has since acked (an
    // agent that restarts registers again, which starts its version over).
    n.table_version = n.table_version.max(hb.table_version);
    st.note_activity(hb.node, &hb.activity);
    // Ranks the agent still runs that should not run: their job ended, or they were
    // counted lost while the node was silent. Killed until they are gone.
    let (x, y) = hb.node;
    for &(id, rank) in &hb.running {
        // A rank its agent reported exited is listed only by a beat taken before that
        // report (one that waited at its liveness head, or crossed the report): not
        // stray. At 1,024 emulated nodes launching in a row such beats sent a kill each.
        let stray = st
            .jobs
            .get(id)
            .is_none_or(|j| match j.ranks.get(rank as usize) {
                None | Some(Rank::Gone) => true,
                Some(Rank::Exited(_)) => false,
                Some(_) => j.record.state().is_final(),
            });
        if stray {
            warn!(job = %id, rank, node = %format!("{x},{y}"), "killing a rank that should not run");
            st.signal_node(fx, id, hb.node, 0);
        }
    }
    let latest = st.slicer.latest().map_or(0, |(_, t)| t.version);
    // Sent again when the agent lacked it a while after it went: judged at the time the
    // beat was taken, not heard (a beat batched by its head is up to a period old, and
    // at 1,024 nodes launching in a row every such beat sent its own table again).
    let unanswered_ns = TABLE_RESEND_NS * i64::from(liveness_scale(st.cfg.mesh.area()));
    let resend = st.nodes[i].table_version < latest
        && st.nodes[i]
            .table_sent
            .is_none_or(|(v, at)| v < latest || now.mono_ns - age_ns - at > unanswered_ns);
    if resend {
        st.send_table(fx, now, i);
    }
    true
}
