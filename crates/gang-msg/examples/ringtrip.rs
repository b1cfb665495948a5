//! Ring round trip: rank 0 sends a small token to rank 1, every rank passes it on to its
//! right neighbour, and rank 0 times its return (each lap checked: the token carries its
//! lap number). Prints the round trip's median and p99 in µs, and with `--samples 1`
//! every lap's. `--iters N --warmup N --size BYTES` (at least 8).

#[path = "common/util.rs"]
mod util;

use std::time::Instant;
use util::{Args, die};

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let (r, n) = (comm.rank(), comm.size());
    if n < 2 {
        die("a ring needs two ranks");
    }
    let (iters, warmup, size): (usize, usize, usize) = (
        a.get("iters", 2000),
        a.get("warmup", 200),
        a.get("size", 8).max(8),
    );
    let samples = a.get("samples", 0u8) != 0;
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let e = |r: gang_msg::Result<()>| r.unwrap_or_else(|e| die(&e.to_string()));
    let mut rtt = Vec::with_capacity(iters);
    let mut msg = vec![0u8; size];
    for lap in 0..(warmup + iters) as u64 {
        if r == 0 {
            msg[..8].copy_from_slice(&lap.to_le_bytes());
            let t = Instant::now();
            e(comm.send(right, 0, &msg));
            let (_, _, m) = comm
                .recv(Some(left), Some(0))
                .unwrap_or_else(|e| die(&e.to_string()));
            let ns = t.elapsed().as_nanos() as u64;
            if m.len() != size || m[..8] != lap.to_le_bytes() {
                die(&format!("lap {lap}: a wrong token came back"));
            }
            if lap >= warmup as u64 {
                rtt.push(ns);
            }
        } else {
            let (_, _, m) = comm
                .recv(Some(left), Some(0))
                .unwrap_or_else(|e| die(&e.to_string()));
            if m.len() != size || m[..8] != lap.to_le_bytes() {
                die(&format!("lap {lap}: a wrong token"));
            }
            e(comm.send(right, 0, &m));
        }
    }
    if r == 0 {
        let mut sorted = rtt.clone();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        let all = if samples {
            let us: Vec<String> = rtt
                .iter()
                .map(|ns| format!("{:.2}", *ns as f64 / 1000.0))
                .collect();
            format!(",\"samples_us\":[{}]", us.join(","))
        } else {
            String::new()
        };
        println!(
            "{{\"example\":\"ringtrip\",\"ranks\":{n},\"size\":{size},\"iters\":{iters},\"rtt_median_us\":{:.2},\"rtt_p99_us\":{:.2}{all}}}",
            at(0.5),
            at(0.99)
        );
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
