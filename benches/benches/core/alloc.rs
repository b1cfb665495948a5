//! Criterion: one placement decision on a 32x32 mesh at 80% occupancy, per placer (the
//! bench keeps its old name, `alloc`, and its group name, so earlier baselines compare).

use criterion::{Criterion, criterion_group, criterion_main};
use gang_benches::placement_cases;
use gang_core::PlacerKind;

fn place(c: &mut Criterion) {
    let cases = placement_cases(256, 42);
    let mut g = c.benchmark_group("alloc_32x32_80pct");
    for kind in PlacerKind::ALL {
        let placer = kind.get();
        let mut i = 0;
        g.bench_function(kind.to_string(), |b| {
            b.iter(|| {
                let (occ, shape) = &cases[i % cases.len()];
                i += 1;
                std::hint::black_box(placer.find(occ, *shape))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, place);
criterion_main!(benches);
