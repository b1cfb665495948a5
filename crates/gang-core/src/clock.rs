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
        }
    }

    /// Record a probe; probes whose timestamps are inconsistent (a negative round trip,
    /// the clock stepped mid-probe) are ignored. Returns whether it was kept.
    pub fn add(&mut self, p: Probe) -> bool {
        if p.t4 < p.t1 || p.t3 < p.t2 || p.delay() < 0 {
            return false;
        }
        if self.probes.len() == self.window {
            self.probes.pop_front();
        }
        self.probes.push_back(p);
        true
    }

    /// From the minimum-delay probe of the window.
    pub fn estimate(&self) -> Option<Estimate> {
        let best = self.probes.iter().min_by_key(|p| p.delay())?;
        Some(Estimate {
            offset_ns: best.offset(),
            error_ns: best.error(),
        })
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
}
