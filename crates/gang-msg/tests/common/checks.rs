//! What the tests and the bench read off a job: percentiles, a rank's directory, and a
//! ring deadlock as the state pages show it.

use super::*;

/// Median and p99 of a sample (sorted copy), in the sample's unit.
pub fn percentiles(v: &[u64]) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

pub fn dir_of(job: &Job, rank: usize) -> PathBuf {
    Path::new(job.dir.path()).join(format!("r{rank}"))
}

/// The end state of the deadlock examples (`deadlock`, `c/deadlock.c`) as the
/// master's detector sees it: every rank ready and blocked, Σ posted ==
/// Σ delivered, unchanged over two reads of the state pages 200 ms apart,
/// each rank waiting on its right neighbour with tag 2 after ten ring passes.
/// Returns the second reading.
pub fn expect_ring_deadlock(job: &mut Job) -> Vec<StateSnapshot> {
    let n = job.size();
    let settled = |s: &[StateSnapshot]| {
        s.iter().all(|s| s.ready && s.blocked_since_ns != 0)
            && s.iter().map(|s| s.posted_sends).sum::<u64>()
                == s.iter().map(|s| s.delivered).sum::<u64>()
    };
    let first = job.wait_states(
        Duration::from_secs(30),
        "every rank blocked, posted == delivered",
        settled,
    );
    std::thread::sleep(Duration::from_millis(200));
    let second = job.snapshots();
    assert!(settled(&second));
    for r in 0..n {
        // Unchanged over two checks: the detector's condition.
        assert_eq!(
            (
                first[r].posted_sends,
                first[r].delivered,
                first[r].blocked_since_ns
            ),
            (
                second[r].posted_sends,
                second[r].delivered,
                second[r].blocked_since_ns
            ),
            "rank {r}"
        );
        assert_eq!(
            (second[r].wait_src, second[r].wait_tag),
            (((r + 1) % n) as i32, 2),
            "rank {r} waits on its right neighbour"
        );
        // Ten ring passes plus the init barrier-free start: 10 sent, 10 received.
        assert_eq!(
            (second[r].posted_sends, second[r].delivered),
            (10, 10),
            "rank {r}"
        );
    }
    second
}
