//! Per-decision latency of each placer on a 32x32 mesh at 80% occupancy: every
//! decision timed on its own, the placers interleaved in one run so machine noise hits
//! them alike. Prints JSON: median, p99 and mean in microseconds, and the hit rate (each
//! row names its placer under `placer` and, for one release, under its old key `allocator`).

use std::time::Instant;

use gang_benches::{median_p99, placement_cases};
use gang_core::PlacerKind;

fn main() {
    let cases = placement_cases(2000, 7);
    let rounds = 20;
    let mut samples: Vec<Vec<f64>> = vec![vec![]; PlacerKind::ALL.len()];
    let mut hits = vec![0usize; PlacerKind::ALL.len()];
    for _ in 0..rounds {
        for (c, (occ, shape)) in cases.iter().enumerate() {
            // Rotate which placer goes first, so none always finds the case in cache.
            for k in (0..PlacerKind::ALL.len()).map(|i| (i + c) % PlacerKind::ALL.len()) {
                let kind = PlacerKind::ALL[k];
                let placer = kind.get();
                let t = Instant::now();
                let r = std::hint::black_box(placer.find(occ, *shape));
                samples[k].push(t.elapsed().as_nanos() as f64 / 1000.0);
                hits[k] += r.is_some() as usize;
            }
        }
    }
    let rows: Vec<_> = PlacerKind::ALL
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            let mean = samples[k].iter().sum::<f64>() / samples[k].len() as f64;
            let (median, p99) = median_p99(&mut samples[k]);
            serde_json::json!({
                "placer": kind.to_string(),
                "allocator": kind.to_string(),
                "decisions": samples[k].len(),
                "median_us": median,
                "p99_us": p99,
                "mean_us": mean,
                "found_fraction": hits[k] as f64 / samples[k].len() as f64,
            })
        })
        .collect();
    let out = serde_json::json!({"bench": "alloc_latency", "mesh": "32x32", "occupancy": 0.8, "results": rows});
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
