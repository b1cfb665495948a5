//! A master's recovery of a long history, as at every start and every takeover: JOBS
//! finished jobs (default 1,000,000, each a realistic 2x2 job's row) and 100 queued ones,
//! rebuilt into the master's state in one round (`reactor::on_recover`, saved to a real
//! SQLite file), RUNS times. The rows are decoded beforehand: this is the state's part of a
//! takeover, after the store's.
//!
//! Prints JSON: the recovery's median and p99 in milliseconds.

use std::time::Instant;

use gang_benches::{env_or, median_p99};
use gang_core::Shape;
use gang_master::config::MasterConfig;
use gang_master::state::{MasterState, Now, Persisted, reactor, round};

fn main() {
    let jobs: u64 = env_or("JOBS", 1_000_000);
    let runs: usize = env_or("RUNS", 5);
    let mut records: Vec<_> = (1..=jobs)
        .map(|i| gang_e2e::failover::saved_job(i, "completed"))
        .collect();
    records.extend((jobs + 1..=jobs + 100).map(|i| gang_e2e::failover::saved_job(i, "queued")));
    let dir = tempfile::tempdir().unwrap();
    let mut ms = vec![];
    for run in 0..runs {
        let db = dir.path().join(format!("state-{run}.db"));
        let cfg = MasterConfig::for_test(Shape::new(14, 14), db.clone());
        let mut store = gang_master::persistence::sqlite::Store::open(&db).unwrap();
        let mut st = MasterState::new(cfg, &Persisted::default()).unwrap();
        let recs = records.clone();
        let now = Now {
            mono_ns: 1_000_000_000,
            wall_ns: 1_800_000_000_000_000_000,
            live_ns: 1_000_000_000,
        };
        let t = Instant::now();
        let (found, saved) = round::run(&mut st, &mut store, now, |st, fx, now| {
            reactor::on_recover(st, fx, now, recs, &[])
        });
        let took = t.elapsed().as_secs_f64() * 1e3;
        found.expect("recovered");
        saved.expect("saved");
        eprintln!("run {run}: {took:.0} ms");
        ms.push(took);
        let t = Instant::now();
        drop(st);
        eprintln!(
            "  (dropping the state: {:.0} ms)",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let (m50, m99) = median_p99(&mut ms);
    println!(
        "{}",
        serde_json::json!({
            "finished_jobs": jobs,
            "queued_jobs": 100,
            "runs": runs,
            "recovery_ms": {"median": m50, "p99": m99},
        })
    );
}
