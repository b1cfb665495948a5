//! The human summary of a run (the machine-readable one is the JSON report itself).

use std::fmt::Write;

use crate::sim::{Figures, Report};

fn row(out: &mut String, name: &str, f: &Figures) {
    let _ = writeln!(
        out,
        "{name:<10} {:>8} {:>7.1}% {:>11.0} {:>11.0} {:>9.2} {:>9.2} {:>12.0}",
        f.jobs,
        f.utilization * 100.0,
        f.mean_wait_s,
        f.mean_response_s,
        f.mean_bounded_slowdown,
        f.p95_bounded_slowdown,
        f.makespan_s
    );
}

/// A table comparing the replay with the trace's recorded schedule.
pub fn summary(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mesh {} ({} nodes), {}, MPL {}, backfill {}, multiple tasks {}, switch overhead {}",
        r.mesh,
        r.nodes,
        r.placer,
        r.mpl,
        r.backfill,
        if r.multiple_tasks { "on" } else { "off" },
        r.switch_overhead
    );
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>8} {:>11} {:>11} {:>9} {:>9} {:>12}",
        "", "jobs", "util", "wait s", "resp s", "bsld", "p95 bsld", "makespan s"
    );
    row(&mut out, "simulated", &r.figures);
    row(&mut out, "recorded", &r.recorded);
    let _ = writeln!(
        out,
        "slices: max {}, mean {:.2}; occupancy {:.1}%, internal fragmentation {:.1}%; {:.2} s",
        r.max_slices_used,
        r.mean_slices,
        r.occupancy * 100.0,
        r.internal_fragmentation * 100.0,
        r.sim_seconds
    );
    let s = &r.skipped;
    if s.total() > 0 {
        let _ = writeln!(
            out,
            "skipped {} jobs: {} larger than the mesh{}, {} without run time, {} without processor count, {} malformed lines",
            s.total(),
            s.too_large,
            if s.too_large_examples.is_empty() {
                String::new()
            } else {
                format!(" (e.g. job {:?})", s.too_large_examples)
            },
            s.no_runtime,
            s.no_procs,
            s.malformed
        );
    }
    out
}
