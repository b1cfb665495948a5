//! Liveness summarised up the tree: the master gives each registered node a liveness
//! head (`gang_core::tree::liveness`), and a head sends one batch a period with its own
//! heartbeat and its children's. A batch is one command here, whatever its size.
//!
//! A child's beat in a batch counts only if the caller heads it now: a head speaks for
//! its own group, nobody else's (it can still lie about its children, as an interior node
//! of the order tree can about its subtree; their exit reports and the ranks' own calls
//! stay direct). A node that beats the master itself is always heard, whatever its head:
//! a child whose head is gone falls back to that, so a dead head never makes its children
//! look dead.

use gang_core::tree::liveness::Assignment;

use crate::state::effects::{Coord, Effects};
use crate::state::events::Heartbeat;
use crate::state::reactor::nodes::on_heartbeat_heard;
use crate::state::{MasterState, Now};

/// A node of the liveness tree and where its agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub node: Coord,
    pub address: String,
}

/// The master's answer for one beat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BeatAnswer {
    /// false: the master does not know the node: it must register again.
    pub known: bool,
    /// Where the node sends its next beats (None: the master).
    pub parent: Option<Link>,
    /// Whose beats it gathers.
    pub children: Vec<Link>,
}

impl MasterState {
    fn liveness_tree(&mut self) -> &Assignment {
        if self.liveness_tree.is_none() {
            let up: Vec<bool> = self.nodes.iter().map(|n| n.up).collect();
            let width = self.cfg.liveness_width as usize;
            self.liveness_tree = Some(Assignment::new(&up, width));
        }
        self.liveness_tree.as_ref().expect("just made")
    }

    fn link(&self, i: usize) -> Option<Link> {
        Some(Link {
            node: self.coord(i),
            address: self.nodes[i].address.clone()?,
        })
    }

    /// Node `i`'s place in the liveness tree.
    fn placed_answer(&mut self, i: usize, known: bool) -> BeatAnswer {
        let tree = self.liveness_tree();
        let parent = tree.parent(i);
        let children = tree.children(i).to_vec();
        BeatAnswer {
            known,
            parent: parent.and_then(|p| self.link(p)),
            children: children.into_iter().filter_map(|c| self.link(c)).collect(),
        }
    }
}

/// Heartbeats from the agent of `from`: its own first (age 0), then, from a head, its
/// children's, each with how long ago (ms) the head heard it. One answer per beat.
pub fn on_beats(
    st: &mut MasterState,
    fx: &mut Effects,
    now: Now,
    from: Coord,
    beats: Vec<(Heartbeat, u32)>,
) -> Vec<BeatAnswer> {
    let head = st.node_index(from);
    let mut answers = Vec::with_capacity(beats.len());
    for (j, (hb, age_ms)) in beats.into_iter().enumerate() {
        let Some(i) = st.node_index(hb.node) else {
            answers.push(BeatAnswer::default());
            continue;
        };
        let own = j == 0 && hb.node == from;
        let headed = !own && head.is_some() && st.liveness_tree().parent(i) == head;
        if !own && !headed {
            // Not the caller's to speak for (the tree changed since the head heard it):
            // not counted, and told where to beat now.
            let known = st.nodes[i].up;
            answers.push(st.placed_answer(i, known));
            continue;
        }
        let age_ns = if own {
            0
        } else {
            i64::from(age_ms) * 1_000_000
        };
        let known = on_heartbeat_heard(st, fx, now, hb, age_ns);
        answers.push(st.placed_answer(i, known));
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::events::{ClockReport, Registration};
    use crate::state::reactor::on_register;
    use crate::state::testkit::config;
    use crate::state::{MasterState, Persisted};

    fn now(ms: i64) -> Now {
        let ns = ms * 1_000_000;
        Now {
            mono_ns: ns,
            wall_ns: ns,
            live_ns: ns,
        }
    }

    fn beat(node: Coord) -> Heartbeat {
        Heartbeat {
            node,
            running: vec![],
            clock: ClockReport {
                offset_ns: 0,
                error_ns: 0,
                from_host: true,
            },
            table_version: 0,
            activity: vec![],
        }
    }

    /// A 4x2 master with width 3 and every node registered: heads (0,0) and (0,1).
    fn world() -> MasterState {
        let mut c = config(4, 2, 1);
        c.liveness_width = 3;
        let mut st = MasterState::new(c, &Persisted::default()).unwrap();
        let mut fx = Effects::default();
        for y in 0..2 {
            for x in 0..4 {
                let reg = Registration {
                    node: (x, y),
                    address: format!("n{x}{y}"),
                    running: vec![],
                };
                on_register(&mut st, &mut fx, now(0), reg).unwrap();
            }
        }
        st
    }

    #[test]
    fn a_node_is_told_its_head_and_a_head_its_children() {
        let mut st = world();
        let mut fx = Effects::default();
        let a = on_beats(&mut st, &mut fx, now(10), (2, 0), vec![(beat((2, 0)), 0)]);
        assert!(a[0].known);
        let head = a[0].parent.as_ref().unwrap();
        assert_eq!((head.node, head.address.as_str()), ((0, 0), "n00"));
        let a = on_beats(&mut st, &mut fx, now(10), (0, 0), vec![(beat((0, 0)), 0)]);
        assert_eq!(a[0].parent, None);
        let kids: Vec<Coord> = a[0].children.iter().map(|l| l.node).collect();
        assert_eq!(kids, vec![(1, 0), (2, 0), (3, 0)]);
    }

    #[test]
    fn a_batch_counts_each_child_heard_when_the_head_heard_it_and_only_its_own() {
        let mut st = world();
        let mut fx = Effects::default();
        let batch = vec![
            (beat((0, 0)), 0),
            (beat((1, 0)), 300),
            (beat((2, 0)), 0),
            // Not (0,0)'s child: (0,1) heads it.
            (beat((1, 1)), 0),
        ];
        let a = on_beats(&mut st, &mut fx, now(1000), (0, 0), batch);
        assert_eq!(a.len(), 4);
        assert!(a.iter().all(|a| a.known));
        let heard = |st: &MasterState, i: usize| st.nodes[i].heard_live_ns / 1_000_000;
        assert_eq!(heard(&st, 0), 1000);
        assert_eq!(heard(&st, 1), 700);
        assert_eq!(heard(&st, 2), 1000);
        assert_eq!(heard(&st, 5), 0, "a node the caller does not head");
        assert_eq!(a[3].parent.as_ref().unwrap().node, (0, 1));
        // An older beat never moves a node's hearing back.
        on_beats(
            &mut st,
            &mut fx,
            now(1100),
            (0, 0),
            vec![(beat((0, 0)), 0), (beat((2, 0)), 900)],
        );
        assert_eq!(heard(&st, 2), 1000);
        // A child beating the master itself (its head is gone) is heard.
        on_beats(&mut st, &mut fx, now(1200), (3, 0), vec![(beat((3, 0)), 0)]);
        assert_eq!(heard(&st, 3), 1200);
    }

    #[test]
    fn flat_gives_no_heads() {
        let mut st = world();
        st.cfg.liveness_width = 0;
        st.liveness_tree = None;
        let mut fx = Effects::default();
        let a = on_beats(&mut st, &mut fx, now(10), (2, 0), vec![(beat((2, 0)), 0)]);
        assert_eq!(a[0].parent, None);
        assert!(a[0].children.is_empty());
    }
}
