//! Switch-ins seen from outside: ranks that record, on the machine's monotonic clock
//! (which emulated hosts share, whatever their wall clocks say), when they ran again
//! after being switched out; and what that says of the skew between nodes.

use std::path::Path;

const MS: i64 = 1_000_000;

/// A rank program (Python) that sleeps 1 ms at a time and writes the monotonic time
/// whenever it wakes after a gap of 15 ms or more, to `ARGV[1]/resume.RANK`.
pub const RECORDER: &str = r#"
import os, sys, time
out = open(os.path.join(sys.argv[1], "resume." + os.environ["GANG_RANK"]), "w")
last = time.monotonic_ns()
while True:
    time.sleep(0.001)
    now = time.monotonic_ns()
    if now - last > 15_000_000:
        out.write(f"{now}\n")
        out.flush()
    last = now
"#;

fn read(dir: &Path, r: usize) -> Vec<i64> {
    std::fs::read_to_string(dir.join(format!("resume.{r}")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// For each switch-in rank 0 saw, the spread of that switch-in over all `ranks` (ns);
/// switch-ins some rank missed are left out.
pub fn spreads(dir: &Path, ranks: usize) -> Vec<i64> {
    let all: Vec<Vec<i64>> = (0..ranks).map(|r| read(dir, r)).collect();
    let mut out = Vec::new();
    for &t0 in &all[0] {
        let mut times = vec![t0];
        for other in &all[1..] {
            if let Some(&t) = other.iter().min_by_key(|&&t| (t - t0).abs())
                && (t - t0).abs() < 20 * MS
            {
                times.push(t);
            }
        }
        if times.len() == ranks {
            out.push(times.iter().max().unwrap() - times.iter().min().unwrap());
        }
    }
    out
}

/// Each rank's median lag behind rank 0 at the same switch-in (rank 0's is 0): what a
/// node whose clock estimate is off shows as, whatever the noise of single switch-ins.
pub fn lags(dir: &Path, ranks: usize) -> Vec<i64> {
    let all: Vec<Vec<i64>> = (0..ranks).map(|r| read(dir, r)).collect();
    (0..ranks)
        .map(|r| {
            let d: Vec<i64> = all[0]
                .iter()
                .filter_map(|&t0| all[r].iter().map(|&t| t - t0).min_by_key(|x| x.abs()))
                .filter(|x| x.abs() < 20 * MS)
                .collect();
            if d.is_empty() { 0 } else { quantile(&d, 0.5) }
        })
        .collect()
}

/// The `q` quantile (nearest rank) of a non-empty sample.
pub fn quantile(v: &[i64], q: f64) -> i64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((s.len() - 1) as f64 * q).round() as usize]
}
