//! Criterion: simulator throughput, replaying the first 5000 jobs of the KTH trace (jobs
//! per second is reported as the element throughput).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gang_benches::trace;
use gang_core::{Backfill, Config};
use gang_sim::{sim, swf};

fn throughput(c: &mut Criterion) {
    let t = swf::read(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let mut g = c.benchmark_group("sim_kth_5000");
    g.sample_size(20);
    for (name, mpl, backfill) in [
        ("mpl1_fcfs", 1, Backfill::None),
        ("mpl4_easy", 4, Backfill::Easy),
    ] {
        let cfg = Config {
            mpl,
            backfill,
            ..Config::default()
        };
        let w = sim::workload(&t, None, Some(5000), &cfg);
        g.throughput(Throughput::Elements(w.jobs.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| sim::run(&w, &cfg, None, false).unwrap().figures.jobs)
        });
    }
    g.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
