//! All-to-all: every iteration each rank sends a checked message to every
//! other rank, then receives n-1 messages with any source, checking each
//! sender's sequence numbers arrive in order. `--iters N` or `--seconds S`,
//! `--max-size BYTES`.

#[path = "common/util.rs"]
mod util;

use util::{Args, Stop, die, make, size_for, verify};

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let (r, n) = (comm.rank(), comm.size());
    let max: usize = a.get("max-size", 8000);
    let stop = Stop::from_args(&a);
    let mut next = vec![0u64; n];
    let mut i = 0u64;
    while !stop.done(&comm, i) {
        for d in (0..n).filter(|&d| d != r) {
            comm.send(d, 2, &make(r, d, i, size_for(i + d as u64, max)))
                .unwrap_or_else(|e| die(&e.to_string()));
        }
        for _ in 1..n {
            let (src, _, m) = comm
                .recv(None, Some(2))
                .unwrap_or_else(|e| die(&e.to_string()));
            // Any source: a fast sender may already be one iteration ahead,
            // so only the order per sender is fixed, and that is checked.
            verify(&m, src, r, next[src]).unwrap_or_else(|e| die(&e));
            next[src] += 1;
        }
        i += 1;
    }
    if next.iter().enumerate().any(|(s, &c)| s != r && c != i) {
        die(&format!("per-sender counts {next:?} after {i} iterations"));
    }
    if r == 0 {
        println!("{{\"example\":\"alltoall\",\"ranks\":{n},\"iterations\":{i}}}");
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
