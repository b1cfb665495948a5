//! Co-scheduling figures from the agents' switch reports.
//!
//! Every agent that acted at a slot boundary reports when its first and last signal went
//! out, on the master clock (its own clock corrected by its offset estimate). The skew of
//! a boundary is the spread of the agents' last-signal times: how far apart in time the
//! mesh really switched. A boundary is closed once no more reports for it can be on their
//! way (`settle` after its deadline); recent samples are kept for quantiles.
//!
//! Pure: time comes in as an argument; the caller feeds the samples to Prometheus.

use std::collections::{BTreeMap, VecDeque};

use gang_proto::v1;

#[derive(Debug, Clone, Copy, Default)]
struct Boundary {
    first_last: i64,
    last_last: i64,
    agents: u32,
}

/// Samples produced by a call, for the histograms.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Samples {
    pub latency_ns: Vec<i64>,
    pub cost_ns: Vec<i64>,
    pub skew_ns: Vec<i64>,
}

#[derive(Debug)]
pub struct SwitchStats {
    settle_ns: i64,
    window: usize,
    open: BTreeMap<i64, Boundary>,
    skew: VecDeque<i64>,
    latency: VecDeque<i64>,
    cost: VecDeque<i64>,
    reported: u64,
    dropped: u64,
    msg_flushed: u64,
    msg_unflushed: u64,
}

impl SwitchStats {
    pub fn new(settle_ns: i64, window: usize) -> Self {
        SwitchStats {
            settle_ns,
            window: window.max(1),
            open: BTreeMap::new(),
            skew: VecDeque::new(),
            latency: VecDeque::new(),
            cost: VecDeque::new(),
            reported: 0,
            dropped: 0,
            msg_flushed: 0,
            msg_unflushed: 0,
        }
    }

    /// Take one agent's report; boundaries settled by `now_ns` are closed.
    pub fn add(&mut self, report: &v1::SwitchReport, now_ns: i64) -> Samples {
        let mut out = Samples::default();
        // Saturating throughout: the times are the agents' word, and a bogus one must
        // not overflow the master.
        self.dropped = self.dropped.saturating_add(report.dropped);
        self.msg_flushed = self.msg_flushed.saturating_add(report.msg_flushed);
        self.msg_unflushed = self.msg_unflushed.saturating_add(report.msg_unflushed);
        for r in &report.records {
            self.reported += 1;
            let latency = r.last_signal_ns.saturating_sub(r.deadline_ns);
            let cost = r.last_signal_ns.saturating_sub(r.first_signal_ns);
            push(&mut self.latency, self.window, latency);
            push(&mut self.cost, self.window, cost);
            out.latency_ns.push(latency);
            out.cost_ns.push(cost);
            if r.deadline_ns.saturating_add(self.settle_ns) < now_ns {
                continue; // too late to count towards its boundary's skew
            }
            let b = self.open.entry(r.deadline_ns).or_insert(Boundary {
                first_last: r.last_signal_ns,
                last_last: r.last_signal_ns,
                agents: 0,
            });
            b.first_last = b.first_last.min(r.last_signal_ns);
            b.last_last = b.last_last.max(r.last_signal_ns);
            b.agents += 1;
        }
        out.skew_ns = self.close(now_ns);
        out
    }

    /// Close the boundaries settled by `now_ns`; returns their skews (boundaries where at
    /// least two agents acted).
    pub fn close(&mut self, now_ns: i64) -> Vec<i64> {
        let mut skews = vec![];
        while let Some((&deadline, _)) = self.open.first_key_value() {
            if deadline.saturating_add(self.settle_ns) >= now_ns {
                break;
            }
            let (_, b) = self.open.pop_first().expect("present");
            if b.agents >= 2 {
                let skew = b.last_last.saturating_sub(b.first_last);
                push(&mut self.skew, self.window, skew);
                skews.push(skew);
            }
        }
        skews
    }

    pub fn snapshot(&self) -> v1::Stats {
        v1::Stats {
            skew: Some(quantiles(&self.skew)),
            switch_latency: Some(quantiles(&self.latency)),
            switch_cost: Some(quantiles(&self.cost)),
            switches_reported: self.reported,
            switches_dropped: self.dropped,
            msg_flushed: self.msg_flushed,
            msg_unflushed: self.msg_unflushed,
            table_version: 0,
            table_seq: 0,
            quantum_ns: 0,
        }
    }
}

fn push(q: &mut VecDeque<i64>, cap: usize, v: i64) {
    if q.len() == cap {
        q.pop_front();
    }
    q.push_back(v);
}

/// Nearest-rank quantiles.
pub fn quantiles(samples: &VecDeque<i64>) -> v1::Quantiles {
    let mut v: Vec<i64> = samples.iter().copied().collect();
    let Some(s) = gang_core::quantile::summarize(&mut v) else {
        return v1::Quantiles::default();
    };
    v1::Quantiles {
        count: s.count as u64,
        p50_ns: s.p50,
        p99_ns: s.p99,
        max_ns: s.max,
        mean_ns: s.mean as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(deadline: i64, first: i64, last: i64) -> v1::SwitchRecord {
        v1::SwitchRecord {
            table_version: 1,
            slot: 0,
            deadline_ns: deadline,
            first_signal_ns: first,
            last_signal_ns: last,
            actions: 2,
            clock_error_ns: 0,
        }
    }

    fn report(x: u32, records: Vec<v1::SwitchRecord>) -> v1::SwitchReport {
        v1::SwitchReport {
            x,
            y: 0,
            records,
            dropped: 0,
            msg_flushed: 0,
            msg_unflushed: 0,
        }
    }

    #[test]
    fn skew_is_the_spread_of_last_signals_per_boundary_once_settled() {
        let mut s = SwitchStats::new(1_000, 100);
        let a = s.add(
            &report(0, vec![rec(100, 105, 110), rec(200, 202, 204)]),
            300,
        );
        assert_eq!(a.latency_ns, vec![10, 4]);
        assert_eq!(a.cost_ns, vec![5, 2]);
        assert!(a.skew_ns.is_empty(), "not settled yet");
        s.add(&report(1, vec![rec(100, 101, 130)]), 400);
        s.add(&report(2, vec![rec(100, 120, 125)]), 500);
        // Boundary 100 settles after 1100: spread of 110, 130, 125. Boundary 200 had one
        // agent only: no skew.
        assert_eq!(s.close(1_099), Vec::<i64>::new());
        assert_eq!(s.close(1_101), vec![20]);
        assert_eq!(s.close(5_000), Vec::<i64>::new());
        // A report for a settled boundary still counts for latency, not for skew.
        let late = s.add(&report(3, vec![rec(100, 100, 900)]), 6_000);
        assert_eq!((late.latency_ns, late.skew_ns), (vec![800], vec![]));
        let st = s.snapshot();
        assert_eq!(st.skew.unwrap().count, 1);
        assert_eq!(st.switches_reported, 5);
        assert_eq!(st.switch_latency.unwrap().max_ns, 800);
    }

    /// Found by fuzzing (`proto_switch_report`): agents' times at the ends of i64, and
    /// dropped counts that add past u64, overflowed (a panic in debug builds).
    #[test]
    fn bogus_times_saturate_instead_of_overflowing() {
        let mut s = SwitchStats::new(i64::MAX, 10);
        let mut r = report(
            0,
            vec![
                rec(i64::MIN, i64::MIN, i64::MAX),
                rec(i64::MIN, 0, i64::MIN),
            ],
        );
        r.dropped = u64::MAX;
        let a = s.add(&r, i64::MIN);
        assert_eq!(a.latency_ns, vec![i64::MAX, 0]);
        assert_eq!(a.cost_ns, vec![i64::MAX, i64::MIN]);
        // Settled now: the boundary of both records, last signals i64::MIN and i64::MAX.
        assert_eq!(s.add(&r, i64::MAX).skew_ns, vec![i64::MAX]);
        let st = s.snapshot();
        assert_eq!((st.switches_dropped, st.switches_reported), (u64::MAX, 4));
    }

    #[test]
    fn quantiles_use_nearest_rank_over_a_bounded_window() {
        let mut q = VecDeque::new();
        for v in 1..=200 {
            push(&mut q, 100, v);
        }
        let r = quantiles(&q);
        assert_eq!(
            (r.count, r.p50_ns, r.p99_ns, r.max_ns),
            (100, 150, 199, 200)
        );
        assert_eq!(r.mean_ns, 150);
        assert_eq!(quantiles(&VecDeque::new()).count, 0);
    }
}
