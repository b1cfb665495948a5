//! Fine-grain ping-pong between ranks 0 and 1: prints the one-way latency
//! (half a round trip), median and p99. `--iters N --warmup N --size BYTES
//! --spin-us US` (default: `GANG_MSG_SPIN_US`).

#[path = "common/util.rs"]
mod util;

use std::time::Instant;
use util::{Args, die};

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    if comm.size() < 2 {
        die("ping-pong needs two ranks");
    }
    let spin: u64 = a.get("spin-us", comm.spin_us());
    comm.set_spin_us(spin);
    let (iters, warmup, size): (usize, usize, usize) = (
        a.get("iters", 10000),
        a.get("warmup", 1000),
        a.get("size", 8),
    );
    let msg = vec![7u8; size];
    let e = |r: gang_msg::Result<()>| r.unwrap_or_else(|e| die(&e.to_string()));
    let mut rtt = Vec::with_capacity(iters);
    match comm.rank() {
        0 => {
            for i in 0..warmup + iters {
                let t = Instant::now();
                e(comm.send(1, 0, &msg));
                let (_, _, m) = comm
                    .recv(Some(1), Some(0))
                    .unwrap_or_else(|e| die(&e.to_string()));
                if m.len() != size {
                    die("short pong");
                }
                if i >= warmup {
                    rtt.push(t.elapsed().as_nanos() as u64);
                }
            }
        }
        1 => {
            for _ in 0..warmup + iters {
                let (_, _, m) = comm
                    .recv(Some(0), Some(0))
                    .unwrap_or_else(|e| die(&e.to_string()));
                e(comm.send(0, 0, &m));
            }
        }
        _ => {}
    }
    if comm.rank() == 0 {
        rtt.sort_unstable();
        let half = |q: f64| rtt[((rtt.len() - 1) as f64 * q) as usize] as f64 / 2000.0;
        println!(
            "{{\"example\":\"pingpong\",\"spin_us\":{spin},\"size\":{size},\"iters\":{iters},\"one_way_median_us\":{:.2},\"one_way_p99_us\":{:.2}}}",
            half(0.5),
            half(0.99)
        );
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
