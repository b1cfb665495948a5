//! Node liveness: quiet liveness of idle nodes, the node timeout of busy ones.

use super::S::*;
use super::run;
use crate::job::State::*;
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
