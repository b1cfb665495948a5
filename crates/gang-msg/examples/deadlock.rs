//! Deadlocks on purpose: after a few ring passes, every rank first receives
//! from its right neighbour, which is doing the same. Nothing is in flight,
//! every rank is blocked: what the master's deadlock detector looks for.

#[path = "common/util.rs"]
mod util;

use util::die;

fn main() {
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let (r, n) = (comm.rank(), comm.size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for i in 0..10u8 {
        comm.send(right, 1, &[i])
            .unwrap_or_else(|e| die(&e.to_string()));
        comm.recv(Some(left), Some(1))
            .unwrap_or_else(|e| die(&e.to_string()));
    }
    eprintln!("rank {r}: receiving from {right} before sending: deadlock");
    let _ = comm.recv(Some(right), Some(2));
    comm.send(left, 2, b"never")
        .unwrap_or_else(|e| die(&e.to_string()));
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
