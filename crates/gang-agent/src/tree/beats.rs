//! Liveness up the tree, the agent's side: where this node sends its heartbeats (its
//! liveness head, or the master), and, for a head, its children's latest beats until its
//! next batch (`gang_core::tree::liveness::Gather`) with the master's answers to hand back.
//!
//! The master names each node's head and each head's children in its heartbeat answers.
//! A head takes beats only from the nodes the master says it heads (by their
//! certificates), each bounded in size. A child whose head cannot be reached or refuses
//! beats the master itself for a few periods (`FALLBACK_PERIODS`), then tries its head
//! again if the master still names it: a dead head costs its children one beat's detour,
//! never their liveness.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gang_core::tree::liveness::Gather;
use gang_proto::v1::{
    BeatRequest, BeatResponse, HeartbeatRequest, HeartbeatResponse, LivenessLink,
};
use prost::Message;
use tokio::time::Instant;
use tonic::Status;

use crate::error::Coord;
use crate::peers::PeerPool;

/// The largest beat a head takes from a child (a heartbeat lists the node's running ranks
/// and their messaging activity: a few per node).
pub const MAX_BEAT_BYTES: usize = 64 << 10;
/// After its head failed it, a child beats the master itself this many periods.
pub const FALLBACK_PERIODS: u32 = 4;
/// A head that hands back no fresh answer of the master this many beats in a row has
/// failed its child (it may be cut off from the master).
pub const UNANSWERED_BEATS: u32 = 3;

/// Where this node's heartbeats go, and what it gathers as a head.
#[derive(Debug, Default)]
pub struct Liveness {
    state: Mutex<State>,
    /// Channels to heads, driven by the session's runtime (set by `agent::start`).
    peers: OnceLock<Arc<PeerPool>>,
}

#[derive(Debug, Default)]
struct State {
    parent: Option<LivenessLink>,
    children: BTreeSet<(u32, u32)>,
    gather: Gather<(u32, u32), HeartbeatRequest, HeartbeatResponse>,
    /// Beat the master itself until then (the head failed us).
    fallback_until: Option<Instant>,
    /// Beats to the head in a row that brought back no fresh answer of the master.
    unanswered: u32,
    /// When this node last sent a beat its head took.
    last_to_head: Option<Instant>,
    /// The origin of the gathering's milliseconds.
    epoch: Option<Instant>,
}

impl State {
    fn ms(&mut self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(now);
        now.saturating_duration_since(epoch).as_millis() as u64
    }
}

/// Where the next heartbeat goes.
#[derive(Debug)]
pub enum Route {
    /// To the master, alone.
    Master,
    /// To the master, with these children's beats (ms since the head heard each).
    Batch(Vec<(HeartbeatRequest, u32)>),
    /// To this head.
    Head(LivenessLink),
}

impl Liveness {
    pub fn set_peers(&self, peers: Arc<PeerPool>) {
        let _ = self.peers.set(peers);
    }

    pub fn peers(&self) -> Option<&Arc<PeerPool>> {
        self.peers.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Only plain data under the lock: a panic cannot leave it half-changed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether some child's beat waits for a batch.
    pub fn pending(&self) -> bool {
        self.lock().gather.pending()
    }

    /// Where to send the beat due now; a head's batch takes its children's beats.
    pub fn route(&self, now: Instant) -> Route {
        let mut s = self.lock();
        if !s.children.is_empty() || s.gather.pending() {
            let ms = s.ms(now);
            let beats = s.gather.take(ms);
            let beats = beats
                .into_iter()
                .map(|(_, b, age)| (b, age.min(u64::from(u32::MAX)) as u32))
                .collect();
            return Route::Batch(beats);
        }
        let falling_back = s.fallback_until.is_some_and(|t| now < t);
        match &s.parent {
            Some(p) if !falling_back => Route::Head(p.clone()),
            _ => Route::Master,
        }
    }

    /// The head could not be reached or refused: beat the master for a while.
    pub fn head_failed(&self, now: Instant, period: Duration) {
        let mut s = self.lock();
        s.fallback_until = Some(now + period * FALLBACK_PERIODS);
        s.unanswered = 0;
    }

    /// The head took a beat; `fresh`: with an answer of the master of the last periods.
    /// Without one `UNANSWERED_BEATS` times in a row, the head has failed us: true.
    pub fn head_took(&self, fresh: bool, now: Instant, period: Duration) -> bool {
        let mut s = self.lock();
        s.unanswered = if fresh { 0 } else { s.unanswered + 1 };
        if s.unanswered >= UNANSWERED_BEATS {
            s.fallback_until = Some(now + period * FALLBACK_PERIODS);
            s.unanswered = 0;
            return true;
        }
        false
    }

    /// Whether the master's answer a head handed back, `age` old when the head took the
    /// beat sent at `sent`, is the master's word on this node now: the head had it after
    /// this node's beat before (it answers that beat or a later one), give or take
    /// `slack` for the head's own delays; for a first beat, when younger than `first`.
    /// Records `sent` as this node's last beat to its head: call it once a beat taken.
    /// Judged against the node's own last beat, not a fixed bound: an idle node beats its
    /// head once an idle period, so the answer to its last beat is about that old (50 s
    /// at 10,000 nodes). Under a fixed bound of a few busy periods every idle child found
    /// its head failing, and its first busy beats went to the master itself: 0.65 direct
    /// heartbeats a rank a 10,000-node launch, each a TLS handshake at the master.
    pub fn judge_answer(
        &self,
        sent: Instant,
        age: Duration,
        (slack, first): (Duration, Duration),
    ) -> bool {
        let mut s = self.lock();
        match s.last_to_head.replace(sent) {
            Some(before) => age < sent.saturating_duration_since(before) + slack,
            None => age < first,
        }
    }

    /// The master's answer for this node: its head and its children from now on.
    pub fn answered(&self, answer: &HeartbeatResponse) {
        let mut s = self.lock();
        s.parent = answer.liveness_parent.clone();
        let children: BTreeSet<(u32, u32)> = answer
            .liveness_children
            .iter()
            .map(|l| (l.x, l.y))
            .collect();
        if children != s.children {
            s.gather.retain(|k| children.contains(k));
            s.children = children;
        }
    }

    /// The master's answer for a child, from a batch: handed back on its next beat.
    pub fn child_answered(&self, child: (u32, u32), answer: HeartbeatResponse, now: Instant) {
        let mut s = self.lock();
        if s.children.contains(&child) {
            let ms = s.ms(now);
            s.gather.answered(child, answer, ms);
        }
    }

    /// A child's beat (NodeRelay.Beat), from the node whose certificate is `from`.
    pub fn beat(
        &self,
        from: Coord,
        req: BeatRequest,
        now: Instant,
    ) -> Result<BeatResponse, Status> {
        let size = req.encoded_len();
        if size > MAX_BEAT_BYTES {
            return Err(Status::invalid_argument(format!(
                "a beat of {size} bytes (at most {MAX_BEAT_BYTES})"
            )));
        }
        let beat = req
            .beat
            .ok_or_else(|| Status::invalid_argument("a beat without its heartbeat"))?;
        if (beat.x, beat.y) != (from.x, from.y) {
            return Err(Status::permission_denied(format!(
                "node {from} cannot beat for node ({},{})",
                beat.x, beat.y
            )));
        }
        let mut s = self.lock();
        if !s.children.contains(&(from.x, from.y)) {
            return Err(Status::permission_denied(format!(
                "node {from} is not one this node heads (as the master last said)"
            )));
        }
        let ms = s.ms(now);
        let answer = s.gather.beat((from.x, from.y), beat, ms);
        Ok(match answer {
            Some((answer, age)) => BeatResponse {
                answer: Some(answer),
                answer_age_ms: age.min(u64::from(u32::MAX)) as u32,
            },
            None => BeatResponse::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(x: u32, y: u32) -> BeatRequest {
        BeatRequest {
            beat: Some(HeartbeatRequest {
                x,
                y,
                ..Default::default()
            }),
        }
    }

    fn link(x: u32, y: u32) -> LivenessLink {
        LivenessLink {
            x,
            y,
            address: format!("https://n{x}{y}:1"),
        }
    }

    fn head_of(children: &[(u32, u32)]) -> Liveness {
        let l = Liveness::default();
        l.answered(&HeartbeatResponse {
            known: true,
            liveness_parent: None,
            liveness_children: children.iter().map(|&(x, y)| link(x, y)).collect(),
        });
        l
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_takes_beats_only_from_its_children_and_for_themselves() {
        let l = head_of(&[(1, 0)]);
        let t = Instant::now();
        let me = Coord { x: 1, y: 0 };
        let other = Coord { x: 2, y: 0 };
        assert!(l.beat(me, beat(1, 0), t).is_ok());
        let e = l.beat(other, beat(2, 0), t).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        let e = l.beat(me, beat(2, 0), t).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        let mut big = beat(1, 0);
        big.beat.as_mut().unwrap().running = (0..10_000)
            .map(|r| gang_proto::v1::RankRef { job_id: 1, rank: r })
            .collect();
        let e = l.beat(me, big, t).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_batches_its_children_and_hands_back_the_masters_answers() {
        let l = head_of(&[(1, 0), (2, 0)]);
        let t = Instant::now();
        let first = l.beat(Coord { x: 1, y: 0 }, beat(1, 0), t).unwrap();
        assert!(first.answer.is_none(), "no answer of the master yet");
        let Route::Batch(beats) = l.route(t + Duration::from_millis(300)) else {
            panic!("a head sends batches");
        };
        assert_eq!(beats.len(), 1);
        assert_eq!((beats[0].0.x, beats[0].1), (1, 300));
        l.child_answered(
            (1, 0),
            HeartbeatResponse {
                known: true,
                ..Default::default()
            },
            t,
        );
        let next = l
            .beat(
                Coord { x: 1, y: 0 },
                beat(1, 0),
                t + Duration::from_millis(500),
            )
            .unwrap();
        assert_eq!(next.answer.map(|a| a.known), Some(true));
        assert_eq!(next.answer_age_ms, 500);
        // Nothing new since: a batch of the head alone.
        let Route::Batch(beats) = l.route(t + Duration::from_millis(900)) else {
            panic!("a head sends batches");
        };
        assert_eq!(beats.len(), 1, "the beat at 500 ms");
        let Route::Batch(beats) = l.route(t + Duration::from_millis(1000)) else {
            panic!("a head sends batches");
        };
        assert!(beats.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_beats_its_head_and_the_master_while_its_head_fails_it() {
        let l = Liveness::default();
        let t = Instant::now();
        assert!(matches!(l.route(t), Route::Master));
        l.answered(&HeartbeatResponse {
            known: true,
            liveness_parent: Some(link(0, 0)),
            liveness_children: vec![],
        });
        assert!(matches!(l.route(t), Route::Head(h) if (h.x, h.y) == (0, 0)));
        let period = Duration::from_millis(500);
        l.head_failed(t, period);
        assert!(matches!(l.route(t + period), Route::Master));
        assert!(matches!(
            l.route(t + period * FALLBACK_PERIODS),
            Route::Head(_)
        ));
        // A head that takes beats but brings no answer of the master fails us too.
        let later = t + period * 10;
        for _ in 1..UNANSWERED_BEATS {
            l.head_took(false, later, period);
        }
        l.head_took(true, later, period);
        assert!(matches!(l.route(later), Route::Head(_)));
        for _ in 0..UNANSWERED_BEATS {
            l.head_took(false, later, period);
        }
        assert!(matches!(l.route(later + period), Route::Master));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_fresh_if_the_head_had_it_after_the_nodes_last_beat() {
        let l = Liveness::default();
        let t = Instant::now();
        let s = Duration::from_secs;
        let bounds = (s(2), s(20));
        // A first beat: judged by the fixed bound alone.
        assert!(!l.judge_answer(t, s(25), bounds));
        // An idle node beating every 50 s: the answer to its last beat is ~45 s old.
        assert!(l.judge_answer(t + s(50), s(45), bounds));
        // The head kept an answer from before that beat (cut off from the master).
        assert!(!l.judge_answer(t + s(100), s(53), bounds));
        // Busy beats every 5 s: an answer that came within the head's slack counts.
        assert!(l.judge_answer(t + s(105), s(6), bounds));
        assert!(!l.judge_answer(t + s(110), s(8), bounds));
        // A first beat once more, for a fresh state.
        let l = Liveness::default();
        assert!(l.judge_answer(t, s(19), bounds));
    }
}
