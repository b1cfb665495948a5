//! A job that is slow, not stuck: rank 0 sleeps (5 s by default, or argv[1] seconds)
//! while every other rank waits in a receive from it; then it sends to each and all end.
//! The deadlock check must never flag it: rank 0 is not blocked in a receive.

use std::time::Duration;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let comm = gang_msg::init().expect("init");
    let (r, n) = (comm.rank(), comm.size());
    if r == 0 {
        std::thread::sleep(Duration::from_secs_f64(secs));
        for peer in 1..n {
            comm.send(peer, 3, b"late but there").expect("send");
        }
    } else {
        let (_, _, data) = comm.recv(Some(0), Some(3)).expect("recv");
        assert_eq!(data, b"late but there");
    }
    comm.finalize().expect("finalize");
    println!("rank {r} done");
}
