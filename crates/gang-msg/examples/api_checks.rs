//! Checks of the API's semantics, one per `--mode`:
//! - `any`: source and tag filters skip non-matching messages; any-source,
//!   any-tag receives keep each sender's order.
//! - `nonblocking`: receives posted before the sends, matched in post order;
//!   isend requests complete; test polls to completion.
//! - `collectives`: barrier, broadcast from every root, allreduce sum/min/max
//!   on i64 and f64 against closed forms.
//! - `sleep`: rank 0 sleeps `--ms` before sending to everyone (it is not
//!   blocked meanwhile; the others are).

#[path = "common/util.rs"]
mod util;

use gang_msg::{Comm, Op};
use util::{Args, die, make, verify};

fn check(ok: bool, what: &str) {
    if !ok {
        die(what);
    }
}

fn any(c: &Comm) {
    let (r, n) = (c.rank(), c.size());
    if r != 0 {
        for (tag, b) in [(1, b"a"), (2, b"b"), (1, b"c")] {
            c.send(0, tag, b).unwrap();
        }
        for i in 0..5u64 {
            c.send(0, 3 + r as i32, &make(r, 0, i, 40 + i as usize))
                .unwrap();
        }
    } else {
        for s in 1..n {
            check(
                c.recv(Some(s), Some(2)).unwrap() == (s, 2, b"b".to_vec()),
                "tag filter",
            );
            check(
                c.recv(Some(s), Some(1)).unwrap() == (s, 1, b"a".to_vec()),
                "order within a tag",
            );
            check(
                c.recv(Some(s), None).unwrap() == (s, 1, b"c".to_vec()),
                "any tag from a source",
            );
        }
        let mut next = vec![0u64; n];
        for _ in 0..5 * (n - 1) {
            let (s, t, m) = c.recv(None, None).unwrap();
            check(t == 3 + s as i32, "tag of any-source message");
            verify(&m, s, 0, next[s]).unwrap_or_else(|e| die(&e));
            next[s] += 1;
        }
        check(next.iter().skip(1).all(|&k| k == 5), "count per sender");
    }
    // Negative tags are reserved.
    check(c.send(0, -1, b"x").is_err(), "negative tag refused");
    check(c.send(n, 0, b"x").is_err(), "rank out of range refused");
}

fn nonblocking(c: &Comm) {
    let (r, n) = (c.rank(), c.size());
    // Two receives per peer with the same filter, posted before anything is sent.
    let mut reqs: Vec<_> = (0..n)
        .filter(|&s| s != r)
        .flat_map(|s| {
            [
                (s, 0u64, c.irecv(Some(s), Some(9)).unwrap()),
                (s, 1, c.irecv(Some(s), Some(9)).unwrap()),
            ]
        })
        .collect();
    c.barrier().unwrap();
    let sends: Vec<_> = (0..n)
        .filter(|&d| d != r)
        .flat_map(|d| (0..2u64).map(move |i| (d, i)))
        .map(|(d, i)| c.isend(d, 9, &make(r, d, i, 5000)).unwrap())
        .collect();
    // Poll with test until every receive completed, then wait on the sends.
    let mut left = reqs.len();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while left > 0 {
        check(
            std::time::Instant::now() < deadline,
            "irecv never completed",
        );
        for (s, i, req) in reqs.iter_mut() {
            if let Some((src, tag, m)) = req.test() {
                check(src == *s && tag == 9, "irecv source/tag");
                // Posted first, matched first.
                verify(&m, *s, r, *i).unwrap_or_else(|e| die(&e));
                left -= 1;
            }
        }
        std::thread::yield_now();
    }
    for s in &sends {
        s.wait().unwrap();
        check(s.test(), "isend done after wait");
    }
    // A wait on a receive whose message comes later.
    let req = c.irecv(Some((r + n - 1) % n), Some(10)).unwrap();
    c.send((r + 1) % n, 10, b"late").unwrap();
    check(req.wait().unwrap().2 == b"late", "wait on a later message");
}

fn collectives(c: &Comm) {
    let (r, n) = (c.rank(), c.size());
    for _ in 0..3 {
        c.barrier().unwrap();
    }
    for root in 0..n {
        let mut buf = if r == root {
            format!("from {root}").into_bytes().repeat(root + 1)
        } else {
            Vec::new()
        };
        c.broadcast(root, &mut buf).unwrap();
        check(
            buf == format!("from {root}").into_bytes().repeat(root + 1),
            "broadcast",
        );
    }
    let nn = n as i64;
    let mut v = [r as i64 + 1, -(r as i64), 10 * r as i64];
    c.allreduce_i64(&mut v, Op::Sum).unwrap();
    check(
        v == [
            nn * (nn + 1) / 2,
            -(nn * (nn - 1) / 2),
            10 * nn * (nn - 1) / 2,
        ],
        "i64 sum",
    );
    let mut v = [r as i64 + 5, 3 - r as i64];
    c.allreduce_i64(&mut v, Op::Min).unwrap();
    check(v == [5, 3 - (nn - 1)], "i64 min");
    let mut v = [r as i64 + 5, 3 - r as i64];
    c.allreduce_i64(&mut v, Op::Max).unwrap();
    check(v == [nn + 4, 3], "i64 max");
    let mut f = [0.5 * r as f64, 1.0];
    c.allreduce_f64(&mut f, Op::Sum).unwrap();
    check(f == [0.25 * (nn * (nn - 1)) as f64, nn as f64], "f64 sum");
    let mut f = [r as f64 * 1.5 - 2.0];
    c.allreduce_f64(&mut f, Op::Min).unwrap();
    check(f == [-2.0], "f64 min");
    c.allreduce_f64(&mut f, Op::Max).unwrap();
    check(f == [-2.0], "f64 max of equal values");
    let mut f = [r as f64 * 1.5 - 2.0];
    c.allreduce_f64(&mut f, Op::Max).unwrap();
    check(f == [(nn - 1) as f64 * 1.5 - 2.0], "f64 max");
    // Collective tags are invisible to user receives: nothing is left over.
    let req = c.irecv(None, None).unwrap();
    c.barrier().unwrap();
    let mut req = req;
    check(
        req.test().is_none(),
        "collective traffic leaked into an any-tag receive",
    );
    c.send(r, 0, b"self").unwrap();
    check(
        req.wait().unwrap() == (r, 0, b"self".to_vec()),
        "send to self",
    );
}

fn sleep(c: &Comm, ms: u64) {
    if c.rank() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        for d in 1..c.size() {
            c.send(d, 4, b"woke").unwrap();
        }
    } else {
        check(
            c.recv(Some(0), Some(4)).unwrap().2 == b"woke",
            "wake message",
        );
    }
}

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let mode = a.str("mode", "any");
    match mode.as_str() {
        "any" => any(&comm),
        "nonblocking" => nonblocking(&comm),
        "collectives" => collectives(&comm),
        "sleep" => sleep(&comm, a.get("ms", 1000)),
        m => die(&format!("unknown mode {m}")),
    }
    if comm.rank() == 0 {
        println!("{{\"example\":\"api_checks\",\"mode\":\"{mode}\",\"ok\":true}}");
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
