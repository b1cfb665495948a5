//! Wall time of a whole replay of the 243k-job SDSC-BLUE trace, parse included, as
//! `gang-sim` does it with its defaults. Prints JSON: every run, the median and the max.

use std::time::Instant;

use gang_benches::{median_p99, trace};
use gang_core::{Backfill, Config};
use gang_sim::{sim, swf};

fn main() {
    let runs: usize = std::env::var("SDSC_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let path = trace("SDSC-BLUE-2000-4.2-cln.swf.gz");
    // gang-sim's defaults.
    let cfg = Config {
        mpl: 4,
        backfill: Backfill::Easy,
        ..Config::default()
    };
    let mut secs = vec![];
    let mut jobs = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        let t = swf::read(&path, false).unwrap();
        let w = sim::workload(&t, None, None, &cfg);
        let r = sim::run(&w, &cfg, None, false).unwrap();
        secs.push(t0.elapsed().as_secs_f64());
        jobs = r.figures.jobs + r.skipped.total();
    }
    let all = secs.clone();
    let max = secs.iter().copied().fold(0.0, f64::max);
    let (median, _) = median_p99(&mut secs);
    let out = serde_json::json!({
        "bench": "sdsc_replay", "trace_jobs": jobs, "runs": all, "median_s": median, "max_s": max,
        "config": {"mpl": cfg.mpl, "backfill": cfg.backfill.to_string(), "placer": cfg.placer.to_string(), "allocator": cfg.placer.to_string()},
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
