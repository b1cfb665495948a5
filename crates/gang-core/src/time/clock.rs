//! Clock offset estimation from NTP-style four-timestamp probes.
//!
//! A probe records t1 (client sends), t2 (server receives), t3 (server replies), t4
//! (client receives). With a symmetric path the server's clock is ahead of the client's by
//! `((t2 - t1) + (t3 - t4)) / 2`; whatever the asymmetry, the true offset lies within half
//! the round trip spent on the network, `((t4 - t1) - (t3 - t2)) / 2`, of that estimate.
//! The sample with the smallest round trip in a window is the tightest, so it is the one
//! kept.

use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub t1: i64,
    pub t2: i64,
    pub t3: i64,
    pub t4: i64,
}

impl Probe {
    /// Server clock minus client clock, nanoseconds.
    pub fn offset(&self) -> i64 {
        ((self.t2 - self.t1) + (self.t3 - self.t4)) / 2
    }

    /// Round trip spent on the network (the server's own time excluded).
    pub fn delay(&self) -> i64 {
        (self.t4 - self.t1) - (self.t3 - self.t2)
    }

    /// Bound on |true offset - offset()|.
    pub fn error(&self) -> i64 {
        (self.delay().max(0) + 1) / 2
    }
}

/// The best of the last `window` probes.
#[derive(Debug, Clone)]
pub struct ClockEstimator {
    window: usize,
    probes: VecDeque<Probe>,
    /// Consecutive probes that contradict the window's estimate (a step is suspected).
    contradicting: usize,
}

/// How far a probe's offset may stray from the estimate beyond both error bounds
/// before it contradicts it: what the two clocks may drift apart over a window (16
/// probes a second apart at 100 ppm is 1.6 ms).
pub const STEP_SLACK_NS: i64 = 2_000_000;
/// How fast two clocks are taken to drift apart at most, in ns per ms (parts per million):
/// a probe's error bound grows by this much for every ms it ages.
pub const DRIFT_PPM: i64 = 100;

/// Consecutive contradicting probes that make a step: one could be a fluke.
pub const STEP_PROBES: usize = 2;

/// What a probe did to the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Inconsistent timestamps: not used.
    Ignored,
    /// Taken into the window.
    Kept,
    /// It and the probes before it contradict the window: one of the clocks stepped
    /// (settimeofday, an NTP step, a VM resumed). The window now holds only them, and the
    /// estimate moved by `by_ns`.
    Stepped { by_ns: i64 },
}

/// An offset and its error bound, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub offset_ns: i64,
    pub error_ns: i64,
}

impl ClockEstimator {
    pub fn new(window: usize) -> Self {
        ClockEstimator {
            window: window.max(1),
            probes: VecDeque::new(),
            contradicting: 0,
        }
    }

    /// Whether the newest probes contradict the window (a step may be under way: the
    /// next probe decides).
    pub fn contradicting(&self) -> bool {
        self.contradicting > 0
    }

    /// Record a probe; probes whose timestamps are inconsistent (a negative round trip,
    /// the clock stepped mid-probe) are ignored. Returns whether it was kept.
    pub fn add(&mut self, p: Probe) -> bool {
        self.add_probe(p) != Added::Ignored
    }

    /// Record a probe, and say whether it revealed a step of one of the clocks: the
    /// minimum-delay rule alone would hold on to a pre-step probe for a whole window.
    pub fn add_probe(&mut self, p: Probe) -> Added {
        if p.t4 < p.t1 || p.t3 < p.t2 || p.delay() < 0 {
            return Added::Ignored;
        }
        let before = self.estimate();
        // With probes seconds apart, what the clocks may have drifted since the newest
        // one widens the window's bound too.
        let since_newest = self.probes.back().map_or(0, |n| (p.t4 - n.t4).max(0));
        let contradicts = before.is_some_and(|e| {
            let bound = e.error_ns + since_newest / 1_000_000 * DRIFT_PPM;
            (p.offset() - e.offset_ns).abs() > p.error() + bound + STEP_SLACK_NS
        });
        self.contradicting = if contradicts {
            self.contradicting + 1
        } else {
            0
        };
        if self.probes.len() == self.window {
            self.probes.pop_front();
        }
        self.probes.push_back(p);
        // Enough probes against the window, or one so tight that its bound excludes the
        // old estimate and it took over: a step either way. The window keeps only the
        // probes since.
        let took_over = contradicts
            && self.estimate()
                == Some(Estimate {
                    offset_ns: p.offset(),
                    error_ns: p.error(),
                });
        if self.contradicting >= STEP_PROBES || took_over {
            let keep = self.contradicting.clamp(1, self.probes.len());
            self.probes.drain(..self.probes.len() - keep);
            self.contradicting = 0;
            let by_ns = match (before, self.estimate()) {
                (Some(b), Some(a)) => a.offset_ns - b.offset_ns,
                _ => 0,
            };
            return Added::Stepped { by_ns };
        }
        Added::Kept
    }

    /// From the minimum-delay probe of the window.
    ///
    /// A probe's bound grows with its age at the rate two clocks may drift apart
    /// ([`DRIFT_PPM`], as NTP's dispersion does): a tight probe from the start of the
    /// window is not preferred to a nearly as tight fresh one on clocks that drift.
    pub fn estimate(&self) -> Option<Estimate> {
        let newest = self.probes.back()?.t4;
        let bound = |p: &Probe| p.error() + (newest - p.t4).max(0) / 1_000_000 * DRIFT_PPM;
        let best = self.probes.iter().min_by_key(|p| bound(p))?;
        Some(Estimate {
            offset_ns: best.offset(),
            error_ns: bound(best),
        })
    }
}

/// Probes sent `BURST_GAP_NS` apart at start and after a step, to fill the window fast.
pub const BURST: u32 = 8;
pub const BURST_GAP_NS: i64 = 20_000_000;
/// An estimate that moved by at most this much is quiet: the period may double.
pub const QUIET_MOVE_NS: i64 = 250_000;
/// An estimate that moved by more than this (or a step) brings the shortest period back.
pub const LOUD_MOVE_NS: i64 = 1_000_000;

/// What a probe gave, for [`ProbePacer::next_gap_ns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probed {
    /// Answered and kept: the published offset moved by this much (ns, signed).
    Moved(i64),
    /// One of the clocks stepped.
    Stepped,
    /// Kept, but it contradicts the window: probe again at once to confirm or dismiss a
    /// step, rather than a long period later.
    Contradicted,
    /// Not answered, or its timestamps were inconsistent.
    Failed,
}

/// How long to wait before the next probe. NTP's poll interval, simplified: a burst at
/// start and after a step, then `min_ns`, doubling while the estimate stays put, up to
/// `max_ns`; back to `min_ns` when it moves more than [`LOUD_MOVE_NS`]. On clocks that
/// drift apart at `d` ppm the period settles where the move a probe sees (`d` x period)
/// lies between the quiet and loud moves, so the error a slower pace adds stays under
/// about 1 ms whatever the drift.
#[derive(Debug, Clone)]
pub struct ProbePacer {
    min_ns: i64,
    max_ns: i64,
    period_ns: i64,
    burst_left: u32,
}

impl ProbePacer {
    pub fn new(min_ns: i64, max_ns: i64) -> Self {
        ProbePacer {
            min_ns,
            max_ns: max_ns.max(min_ns),
            period_ns: min_ns,
            burst_left: BURST,
        }
    }

    pub fn period_ns(&self) -> i64 {
        self.period_ns
    }

    /// Let the period grow to at least `max_ns` (the master asks a large cluster's agents
    /// to probe it less often).
    pub fn raise_max(&mut self, max_ns: i64) {
        self.max_ns = self.max_ns.max(max_ns);
    }

    pub fn next_gap_ns(&mut self, probed: Probed) -> i64 {
        match probed {
            Probed::Stepped => {
                self.period_ns = self.min_ns;
                self.burst_left = BURST;
            }
            Probed::Moved(by) if by.abs() > LOUD_MOVE_NS => self.period_ns = self.min_ns,
            Probed::Contradicted => {
                self.period_ns = self.min_ns;
                return BURST_GAP_NS;
            }
            // The burst's own probes do not lengthen the period.
            Probed::Moved(by) if by.abs() <= QUIET_MOVE_NS && self.burst_left == 0 => {
                self.period_ns = (self.period_ns * 2).min(self.max_ns)
            }
            Probed::Moved(_) | Probed::Failed => {}
        }
        if self.burst_left > 0 {
            self.burst_left -= 1;
            BURST_GAP_NS
        } else {
            self.period_ns
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe over a path with `out`/`back` one-way delays, server ahead by `offset`.
    fn probe(t1: i64, offset: i64, out: i64, back: i64, server: i64) -> Probe {
        let t2 = t1 + out + offset;
        let t3 = t2 + server;
        Probe {
            t1,
            t2,
            t3,
            t4: t3 - offset + back,
        }
    }

    #[test]
    fn a_step_is_followed_after_two_contradicting_probes_and_a_fluke_is_not() {
        let mut e = ClockEstimator::new(16);
        let mut t = 0;
        let mut next = |e: &mut ClockEstimator, offset: i64, delay: i64| {
            t += 1_000_000_000;
            e.add_probe(probe(t, offset, delay / 2, delay / 2, 10_000))
        };
        for _ in 0..5 {
            assert_eq!(next(&mut e, 40_000_000, 200_000), Added::Kept);
        }
        // One probe far off (a delay spike would widen its error instead): not yet.
        assert_eq!(next(&mut e, -960_000_000, 400_000), Added::Kept);
        assert_eq!(e.estimate().unwrap().offset_ns, 40_000_000);
        assert_eq!(next(&mut e, 40_000_000, 200_000), Added::Kept);
        // The clock jumped by a second: two probes agree on it.
        assert_eq!(next(&mut e, -960_000_000, 400_000), Added::Kept);
        match next(&mut e, -960_000_000, 400_000) {
            Added::Stepped { by_ns } => assert_eq!(by_ns, -1_000_000_000),
            other => panic!("{other:?}"),
        }
        assert_eq!(e.estimate().unwrap().offset_ns, -960_000_000);
        // A probe tighter than the window's best that excludes its offset: a step at once.
        match next(&mut e, -460_000_000, 100_000) {
            Added::Stepped { by_ns } => assert_eq!(by_ns, 500_000_000),
            other => panic!("{other:?}"),
        }
        assert_eq!(e.estimate().unwrap().offset_ns, -460_000_000);
        for _ in 0..16 {
            next(&mut e, -960_000_000, 200_000);
        }
        // Drift within the slack is no step.
        for i in 0..20 {
            assert_eq!(
                next(&mut e, -960_000_000 + i * 50_000, 200_000),
                Added::Kept
            );
        }
    }

    #[test]
    fn on_drifting_clocks_a_fresh_probe_beats_an_old_slightly_tighter_one() {
        let mut e = ClockEstimator::new(16);
        // 200 us round trip at t = 1 s, offset 0; then 300 us round trips a second apart
        // while the clocks drift apart by 100 us a second.
        e.add(probe(1_000_000_000, 0, 100_000, 100_000, 10_000));
        for i in 2..=10 {
            e.add(probe(
                i * 1_000_000_000,
                (i - 1) * 100_000,
                150_000,
                150_000,
                10_000,
            ));
        }
        let est = e.estimate().unwrap();
        assert_eq!(est.offset_ns, 900_000, "{est:?}");
        // Its bound: half the round trip, aged by nothing.
        assert_eq!(est.error_ns, 150_000);
    }

    #[test]
    fn symmetric_path_gives_the_exact_offset() {
        let p = probe(1_000, 5_000, 300, 300, 50);
        assert_eq!(p.offset(), 5_000);
        assert_eq!(p.delay(), 600);
        assert_eq!(p.error(), 300);
    }

    #[test]
    fn asymmetric_path_stays_within_the_bound() {
        for (out, back) in [(10, 900), (900, 10), (0, 0), (1, 2)] {
            let p = probe(0, -7_000, out, back, 100);
            assert!(
                (p.offset() - -7_000).abs() <= p.error(),
                "{out}/{back}: {} ± {}",
                p.offset(),
                p.error()
            );
        }
    }

    #[test]
    fn the_minimum_delay_probe_of_the_window_wins() {
        let mut c = ClockEstimator::new(3);
        assert_eq!(c.estimate(), None);
        assert!(c.add(probe(0, 1_000, 5_000, 100, 10)));
        assert!(c.add(probe(10, 1_000, 50, 50, 10)));
        assert!(c.add(probe(20, 1_000, 400, 4_000, 10)));
        assert_eq!(
            c.estimate(),
            Some(Estimate {
                offset_ns: 1_000,
                error_ns: 50
            })
        );
        // The good probe leaves the window.
        assert!(c.add(probe(30, 1_000, 700, 700, 10)));
        assert!(c.add(probe(40, 1_000, 800, 800, 10)));
        assert_eq!(c.estimate().unwrap().error_ns, 700);
        // Inconsistent timestamps are refused.
        assert!(!c.add(Probe {
            t1: 10,
            t2: 5,
            t3: 4,
            t4: 20
        }));
        assert!(!c.add(Probe {
            t1: 10,
            t2: 0,
            t3: 100,
            t4: 20
        }));
    }

    #[test]
    fn the_pace_slows_while_the_estimate_stays_and_quickens_when_it_moves() {
        const S: i64 = 1_000_000_000;
        let mut p = ProbePacer::new(S, 8 * S);
        for _ in 0..BURST {
            assert_eq!(p.next_gap_ns(Probed::Moved(0)), BURST_GAP_NS);
        }
        let gaps: Vec<i64> = (0..5)
            .map(|_| p.next_gap_ns(Probed::Moved(100_000)))
            .collect();
        assert_eq!(gaps, [2 * S, 4 * S, 8 * S, 8 * S, 8 * S]);
        // Neither quiet nor loud: the pace holds; a failure too.
        assert_eq!(p.next_gap_ns(Probed::Moved(-600_000)), 8 * S);
        assert_eq!(p.next_gap_ns(Probed::Failed), 8 * S);
        assert_eq!(p.next_gap_ns(Probed::Moved(-1_500_000)), S);
        assert_eq!(p.next_gap_ns(Probed::Moved(0)), 2 * S);
        // A step: a burst, then the shortest period again.
        assert_eq!(p.next_gap_ns(Probed::Stepped), BURST_GAP_NS);
        for _ in 1..BURST {
            assert_eq!(p.next_gap_ns(Probed::Moved(0)), BURST_GAP_NS);
        }
        assert_eq!(p.next_gap_ns(Probed::Moved(0)), 2 * S);
        // A probe against the window: the next one follows at once, then the pace restarts.
        assert_eq!(p.next_gap_ns(Probed::Contradicted), BURST_GAP_NS);
        assert_eq!(p.next_gap_ns(Probed::Moved(0)), 2 * S);
        assert_eq!(p.next_gap_ns(Probed::Moved(0)), 4 * S);
        // A large cluster's master lets the period grow further; a lower ask changes nothing.
        p.raise_max(32 * S);
        p.raise_max(4 * S);
        let gaps: Vec<i64> = (0..6).map(|_| p.next_gap_ns(Probed::Moved(0))).collect();
        assert_eq!(gaps, [8 * S, 16 * S, 32 * S, 32 * S, 32 * S, 32 * S]);
    }

    #[test]
    fn on_drifting_clocks_the_pace_settles_where_a_probe_sees_under_a_millisecond() {
        // Clocks 300 ppm apart (worse than any healthy oscillator): each probe sees the
        // estimate move by 0.3 ms a second of the period.
        const S: i64 = 1_000_000_000;
        let mut p = ProbePacer::new(S, 64 * S);
        for _ in 0..BURST {
            p.next_gap_ns(Probed::Moved(0));
        }
        let mut gap = S;
        for _ in 0..50 {
            gap = p.next_gap_ns(Probed::Moved(gap / 1_000_000 * 300));
            assert!(gap / 1_000_000 * 300 <= 2 * LOUD_MOVE_NS, "gap {gap}");
        }
    }
}
