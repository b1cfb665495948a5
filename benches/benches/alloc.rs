//! Criterion: one allocation decision on a 32x32 mesh at 80% occupancy, per allocator.

use criterion::{Criterion, criterion_group, criterion_main};
use gang_benches::alloc_cases;
use gang_core::AllocatorKind;

fn alloc(c: &mut Criterion) {
    let cases = alloc_cases(256, 42);
    let mut g = c.benchmark_group("alloc_32x32_80pct");
    for kind in AllocatorKind::ALL {
        let a = kind.get();
        let mut i = 0;
        g.bench_function(kind.to_string(), |b| {
            b.iter(|| {
                let (occ, shape) = &cases[i % cases.len()];
                i += 1;
                std::hint::black_box(a.find(occ, *shape))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, alloc);
criterion_main!(benches);
