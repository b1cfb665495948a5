//! Ring pass: every iteration each rank sends a checked message to its right
//! neighbour and receives one from its left, of sizes from 24 B to 300 KB.
//! `--iters N` or `--seconds S`, `--max-size BYTES`.

#[path = "common/util.rs"]
mod util;

use util::{Args, Stop, die, make, size_for, verify};

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let (r, n) = (comm.rank(), comm.size());
    let max: usize = a.get("max-size", 65536);
    let stop = Stop::from_args(&a);
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let mut i = 0u64;
    let mut bytes = 0usize;
    while !stop.done(&comm, i) {
        let len = size_for(i + r as u64, max);
        comm.send(right, 1, &make(r, right, i, len))
            .unwrap_or_else(|e| die(&e.to_string()));
        let (src, tag, m) = comm
            .recv(Some(left), Some(1))
            .unwrap_or_else(|e| die(&e.to_string()));
        if src != left || tag != 1 {
            die(&format!("got ({src}, {tag}) for ({left}, 1)"));
        }
        verify(&m, left, r, i).unwrap_or_else(|e| die(&e));
        bytes += m.len();
        i += 1;
    }
    if r == 0 {
        println!(
            "{{\"example\":\"ring\",\"ranks\":{n},\"iterations\":{i},\"bytes_received_rank0\":{bytes}}}"
        );
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
