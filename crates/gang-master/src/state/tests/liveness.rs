//! Node liveness: quiet liveness of idle nodes, the node timeout of busy ones.

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::effects::{Coord, NodeTable};
use crate::state::testkit::{World, config};
use crate::state::views::NodeState;

/// Quiet liveness: an idle agent heartbeats seldom, so an idle node is down only after
/// the idle node timeout; a node given work is down after the node timeout, counted from
/// its last call (the answer to its launch included), not from its last idle keepalive.
#[test]
fn an_idle_node_waits_the_idle_timeout_and_a_busy_one_the_node_timeout_from_its_launch() {
    let mut cfg = config(4, 4, 1);
    cfg.idle_heartbeat_ms = 5000;
    cfg.idle_node_timeout_ms = 18_000;
    let up = |w: &World, n: (u32, u32)| {
        w.st.nodes_view()
            .nodes
            .iter()
            .any(|v| v.node == n && v.state == NodeState::Up)
    };
    // Idle and silent for 10 s, five times the node timeout: still up.
    let w = run(
        World::new(cfg),
        &[RegisterAll, Silence((1, 1)), Silence((3, 3)), Wait(10_000)],
    );
    assert!(up(&w, (1, 1)) && up(&w, (3, 3)));
    // Given work now: while its launch is unanswered (a whole-mesh launch can take the
    // master longer than the node timeout to send) it is not judged (the job would have
    // failed); then its launch is answered, and the node timeout counts from then.
    let w = run(
        w,
        &[
            Submit("2x2"),
            Wait(4000),
            State(1, Starting),
            Start(1),
            Wait(1500),
            State(1, Running),
            Wait(1000),
            Signalled(1, 3, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(1, "node (1,1) lost: its agent was silent for 2000 ms"),
        ],
    );
    assert!(!up(&w, (1, 1)));
    // The idle one, silent for 16.5 s, is still up; past 18 s it is down.
    assert!(up(&w, (3, 3)));
    let w = run(w, &[Wait(2000)]);
    assert!(!up(&w, (3, 3)));
}

/// Quiet liveness does not hide an agent known to be gone: a launch that cannot reach
/// an idle node's agent puts it back under the node timeout.
#[test]
fn an_idle_node_whose_agent_a_launch_cannot_reach_is_down_after_the_node_timeout() {
    let mut cfg = config(4, 4, 1);
    cfg.idle_heartbeat_ms = 5000;
    cfg.idle_node_timeout_ms = 18_000;
    let w = run(
        World::new(cfg),
        &[
            RegisterAll,
            Silence((0, 0)),
            Wait(1000),
            Submit("1x1"),
            LaunchUnreachable(1, 0),
            State(1, Failed),
            Wait(2500),
        ],
    );
    let down =
        w.st.nodes_view()
            .nodes
            .iter()
            .any(|v| v.node == (0, 0) && v.state == NodeState::Down);
    assert!(down, "{:?}", w.st.nodes_view().nodes[0]);
}

/// A 2x2 mesh running one 2x2 job, its nodes' agents heartbeating.
fn running_2x2(lease_ms: u32) -> World {
    let mut cfg = config(2, 2, 1);
    cfg.agent_lease_ms = lease_ms;
    run(
        World::new(cfg),
        &[RegisterAll, Submit("2x2"), Start(1), State(1, Running)],
    )
}

const NODES: [(u32, u32); 4] = [(0, 0), (1, 0), (0, 1), (1, 1)];

/// The master stopped for 30 s (fifteen node timeouts) blames nobody for it: on its
/// first tick after, before any heartbeat came in, every node is up and the job runs;
/// the agents' calls then come in and it runs on.
#[test]
fn a_master_paused_for_30_s_blames_no_node_and_its_job_runs_on() {
    let w = run(
        running_2x2(300_000),
        &[
            Pause(30_000),
            State(1, Running),
            Up((0, 0), true),
            Up((1, 1), true),
            Wait(1000),
            Pause(5000),
            Pause(5000),
            Wait(3000),
            State(1, Running),
            Up((0, 1), true),
        ],
    );
    w.fx.assert_quiet();
}

/// Every node silent at once (the master's own link cut, its host's network stalled) is
/// the master's silence, not theirs: nothing is down while the agents' lease lasts (they
/// keep their ranks that long); past it, every node is down and the job fails.
#[test]
fn nodes_all_silent_at_once_are_down_only_past_the_agents_lease() {
    let mut steps: Vec<super::S> = NODES.iter().map(|&n| Silence(n)).collect();
    steps.extend([
        Wait(10_000),
        State(1, Running),
        Up((1, 0), true),
        Wait(49_000),
        State(1, Running),
        Wait(2000),
        Up((0, 0), false),
        Up((1, 1), false),
        // The first node given up fails the job, whose other ranks are told to stop (their
        // agents, silent too, hear it when they are back, or have stopped them already).
        Signalled(1, 3, 0),
        State(1, Failed),
        Reason(1, "lost: its agent was silent"),
    ]);
    run(running_2x2(60_000), &steps);
}

/// One node silent while the master hears the others is that node's silence: down after
/// the node timeout, its job failed naming it, the others up.
#[test]
fn one_node_silent_among_heard_ones_is_down_after_the_node_timeout() {
    run(
        running_2x2(300_000),
        &[
            Silence((1, 0)),
            Wait(1500),
            State(1, Running),
            Wait(1000),
            Up((1, 0), false),
            Up((0, 0), true),
            Signalled(1, 3, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(
                1,
                "node (1,0) lost: its agent was silent for 2000 ms while the master heard others",
            ),
        ],
    );
}

/// A mesh of one node has nobody to compare it with: its silence is judged by the node
/// timeout alone.
#[test]
fn the_only_node_of_a_mesh_is_down_after_the_node_timeout() {
    run(
        World::new(config(1, 1, 1)),
        &[
            RegisterAll,
            Submit("1x1"),
            Start(1),
            Silence((0, 0)),
            Wait(2500),
            Up((0, 0), false),
            State(1, Failed),
        ],
    );
}

/// After a restart, no agent back at all is the master's side (its network, its slow
/// start), not the nodes': adopted ranks wait; once agents are heard again, the one that
/// did not come back is lost after the node timeout.
/// After a takeover from a master that hung, agents find the new one each at its own
/// pace: one that comes 7 s after the others, within the adoption timeout (10 s here,
/// five node timeouts), is slow, not gone; its ranks are adopted and the job runs on. One
/// that never comes is lost once the adoption timeout is out.
#[test]
fn after_a_restart_a_straggling_agent_within_the_adoption_timeout_keeps_its_ranks() {
    let world = || {
        let mut cfg = config(2, 2, 1);
        cfg.adopt_timeout_ms = 10_000;
        run(
            World::new(cfg),
            &[RegisterAll, Submit("2x2"), Start(1), State(1, Running)],
        )
    };
    let w = run(
        world(),
        &[
            Restart,
            Register((0, 0)),
            Register((1, 0)),
            Register((0, 1)),
            Wait(7000),
            State(1, Running),
            Register((1, 1)),
            Wait(5000),
            State(1, Running),
        ],
    );
    let w = run(w, &[ExitAll(1, 0), State(1, Completed)]);
    drop(w);
    run(
        world(),
        &[
            Restart,
            Register((0, 0)),
            Register((1, 0)),
            Register((0, 1)),
            Wait(9000),
            State(1, Running),
            Wait(1500),
            Signalled(1, 3, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(
                1,
                "rank 3 on node (1,1) was not found after a master or agent restart",
            ),
        ],
    );
}

#[test]
fn after_a_restart_ranks_are_lost_only_where_others_came_back() {
    let w = run(
        running_2x2(300_000),
        &[
            Restart,
            Wait(10_000),
            State(1, Running),
            Register((0, 0)),
            Register((1, 0)),
            Register((0, 1)),
            State(1, Running),
            Wait(2500),
            Signalled(1, 3, 0),
            KilledAll(1, 9),
            State(1, Failed),
            Reason(
                1,
                "rank 3 on node (1,1) was not found after a master or agent restart",
            ),
        ],
    );
    // And all of them back in time: it runs on.
    let w2 = run(
        running_2x2(300_000),
        &[
            Restart,
            Wait(10_000),
            RegisterAll,
            Wait(3000),
            State(1, Running),
        ],
    );
    drop((w, w2));
}

/// A beat of `node` listing `running`, holding table `version`.
fn heartbeat(
    node: Coord,
    running: Vec<crate::state::events::RankRef>,
    version: u64,
) -> crate::state::events::Heartbeat {
    crate::state::events::Heartbeat {
        node,
        running,
        clock: Default::default(),
        table_version: version,
        activity: vec![],
    }
}

/// A beat batched at its liveness head may be older than the tables sent since: it
/// neither makes the master forget a table the agent acknowledged nor sends one again.
/// A table on its way (a relay's tree takes seconds on a loaded host) is sent again only
/// when a beat taken well after it went still lacks it; one reported lost, at the next
/// beat. (At 1,024 emulated nodes launching in a row, every batched beat sent its node's
/// table again, one call each.)
#[test]
fn a_table_is_sent_again_only_when_lost_or_long_unacknowledged() {
    use crate::state::reactor::nodes::on_heartbeat_heard;
    let mut w = run(
        World::new(config(4, 4, 1)),
        &[RegisterAll, Lose((2, 2), true)],
    );
    // (3,3) takes the table but its acknowledgement is still on its way.
    w.silent.insert((3, 3));
    let mut w = run(w, &[Submit("4x4"), Start(1), Behind((2, 2))]);
    w.silent.remove(&(3, 3));
    let latest = w.fx.take_tables().iter().map(|(_, t)| t.version).max();
    let latest = latest.expect("the job's table");
    let beat = |w: &mut World, node, age_ms: i64| {
        let hb = heartbeat(node, vec![], latest - 1);
        w.step(|st, fx, now| on_heartbeat_heard(st, fx, now, hb, age_ms * 1_000_000));
        w.fx.take_tables()
    };
    let to = |sent: Vec<(Coord, NodeTable)>| -> Vec<(Coord, u64)> {
        sent.into_iter().map(|(n, t)| (n, t.version)).collect()
    };
    w.advance_ms(700);
    assert_eq!(
        to(beat(&mut w, (1, 1), 600)),
        vec![],
        "an acknowledged table"
    );
    assert_eq!(
        to(beat(&mut w, (1, 1), 0)),
        vec![],
        "acknowledged, whatever the beat says"
    );
    assert_eq!(to(beat(&mut w, (3, 3), 0)), vec![], "on its way");
    assert_eq!(
        to(beat(&mut w, (2, 2), 600)),
        vec![((2, 2), latest)],
        "lost"
    );
    // 5.7 s after it went: a beat of 1 s ago was taken 4.7 s after, one of 0.5 s ago 5.2 s.
    w.advance_ms(5000);
    assert_eq!(
        to(beat(&mut w, (3, 3), 1000)),
        vec![],
        "a beat taken too soon"
    );
    assert_eq!(
        to(beat(&mut w, (3, 3), 500)),
        vec![((3, 3), latest)],
        "unacknowledged"
    );
}

/// On a larger mesh a table's relay takes longer: the wait for its outcome grows with
/// the mesh, as the heartbeat period does (5 s per started 1,024 nodes).
#[test]
fn a_table_on_its_way_is_waited_for_longer_on_a_larger_mesh() {
    use crate::state::reactor::nodes::on_heartbeat_heard;
    // 2,048 nodes: twice the wait.
    let mut w = run(World::new(config(64, 32, 1)), &[RegisterAll]);
    w.silent.insert((3, 3));
    let mut w = run(w, &[Submit("4x4"), Start(1)]);
    let latest = w.fx.take_tables().iter().map(|(_, t)| t.version).max();
    let latest = latest.expect("the job's table");
    let beat = |w: &mut World| {
        let hb = heartbeat((3, 3), vec![], latest - 1);
        w.step(|st, fx, now| on_heartbeat_heard(st, fx, now, hb, 0));
        w.fx.take_tables().len()
    };
    w.advance_ms(6000);
    assert_eq!(beat(&mut w), 0, "6 s: still on its way");
    w.advance_ms(4500);
    assert_eq!(beat(&mut w), 1, "10.5 s: unacknowledged");
}

/// A beat taken before its rank's exit was reported (it waited at its liveness head)
/// lists the rank as running: nothing is killed. A rank of a job the master does not run
/// is killed wherever a beat lists it.
#[test]
fn a_beat_listing_a_rank_reported_exited_kills_nothing() {
    use gang_core::JobId;
    let mut w = run(
        World::new(config(4, 4, 1)),
        &[
            RegisterAll,
            Submit("1x1"),
            Start(1),
            ExitAll(1, 0),
            State(1, Completed),
        ],
    );
    w.fx.take_every_signal();
    let node = {
        let sm = w.view(1).submesh.expect("placed");
        (sm.x, sm.y)
    };
    let beat = |w: &mut World, job: u64| {
        let hb = heartbeat(node, vec![(JobId(job), 0)], 0);
        w.step(|st, fx, now| crate::state::reactor::on_heartbeat(st, fx, now, hb));
        w.fx.take_every_signal()
    };
    assert_eq!(beat(&mut w, 1), vec![], "reported exited");
    assert_eq!(beat(&mut w, 99), vec![(node, JobId(99), 0)], "no such job");
}
