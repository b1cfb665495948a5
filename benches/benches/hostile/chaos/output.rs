//! Checking a long job's output after the bad moments: every line of every rank once, in
//! order.

/// Whether each rank wrote 1..=n in order, then "done n": nothing lost, nothing twice.
/// When not, says how, and keeps the output in a file.
pub fn output_whole(id: u64, text: &str, ranks: usize) -> bool {
    let mut seen: Vec<Vec<u64>> = vec![vec![]; ranks];
    let mut done: Vec<Option<u64>> = vec![None; ranks];
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(r), Some(x)) = (w.next().and_then(|r| r.parse::<usize>().ok()), w.next()) else {
            continue;
        };
        if r >= ranks {
            continue;
        }
        match (x, w.next()) {
            ("done", Some(n)) => done[r] = n.parse().ok(),
            (i, None) => seen[r].extend(i.parse::<u64>().ok()),
            _ => {}
        }
    }
    let ok = (0..ranks).all(|r| {
        let n = seen[r].len() as u64;
        done[r] == Some(n) && seen[r].iter().copied().eq(1..=n)
    });
    if !ok {
        let summary: Vec<String> = (0..ranks)
            .map(|r| {
                let gaps = seen[r].windows(2).filter(|w| w[1] != w[0] + 1).count();
                format!(
                    "rank {r}: {} lines, first {:?}, last {:?}, {gaps} gaps, done {:?}",
                    seen[r].len(),
                    seen[r].first(),
                    seen[r].last(),
                    done[r]
                )
            })
            .collect();
        let keep = std::env::temp_dir().join(format!("chaos-long-job-{id}.out"));
        let _ = std::fs::write(&keep, text);
        let breaks: Vec<String> = (0..ranks)
            .flat_map(|r| {
                seen[r]
                    .windows(2)
                    .filter(|w| w[1] != w[0] + 1)
                    .map(move |w| format!("rank {r}: {} then {}", w[0], w[1]))
            })
            .take(8)
            .collect();
        eprintln!(
            "long job {id}: its output is not whole: {}; out of order: {breaks:?}; kept in {}",
            summary.join("; "),
            keep.display()
        );
    }
    ok
}
