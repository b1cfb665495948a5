//! The master's answer to others while one user holds 20,000 idle connections (security
//! review, "Hostile users on a shared machine", finding 3): a real master (release
//! binaries, a 1x1 cluster, default limits) is sent an attacker's idle connections, half
//! on its Unix socket as an unprivileged uid, half on its TLS port from loopback, none of
//! which ever speaks; the attacker reconnects each one the master closes (a refusal at
//! the limit, the handshake deadline), so 20,000 stay held on its side throughout. Root's
//! `gangctl jobs`, and that of an ordinary user who is not the attacker (`nobody`), are
//! timed `HOSTILE_CALLS` times each (200 by default) before the attack and during it:
//! median and p99 side by side.
//!
//! The master runs with the open-file limit it inherits (20,000 here, as in the review).
//! One process cannot hold 20,000 connections under that same limit (and root here may
//! not raise the hard limit: no CAP_SYS_RESOURCE), so the attacker is two child processes
//! of this bench (itself, re-run with HOSTILE_ROLE=unix|tcp), one per half.
//! Needs root (another uid's connections) and the release binaries, built beforehand:
//! `cargo build --release -p gang-master -p gang-agent -p gang-cli`, then
//! `cargo bench -p gang-benches --bench hostile_connections`.
//! Env: HOSTILE_CONNECTIONS (20000), HOSTILE_CALLS (200).
//! Prints one JSON line `{"bench":"hostile_connections",...}`.

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gang_benches::{env_or, median_p99, open_fds, prebuilt_release_bins, status_kb};
use gang_local::{LocalCluster, LocalClusterOptions};

const ATTACKER: u32 = 54_321;
/// `nobody`: an ordinary user who is neither root nor the attacker.
const BYSTANDER: u32 = 65_534;

/// Whether the peer has closed a connection (EOF or an error), without waiting.
fn gone(s: &mut impl Read) -> bool {
    let mut b = [0u8; 256];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Hold `n` connections made by `connect`, reconnecting every one the master closes, until
/// the bench kills this process; after each sweep, prints "HELD RECONNECTS".
fn hold<S: Read>(n: usize, connect: impl Fn() -> std::io::Result<S>) -> ! {
    let mut conns: Vec<Option<S>> = (0..n).map(|_| None).collect();
    let mut reconnects: u64 = 0;
    loop {
        let mut open = 0;
        for c in conns.iter_mut() {
            if c.as_mut().is_some_and(gone) {
                *c = None;
                reconnects += 1;
            }
            if c.is_none() {
                *c = connect().ok();
            }
            open += u64::from(c.is_some());
        }
        println!("{open} {reconnects}");
        // One sweep of 10,000 sockets is some ms of system calls: pace the sweeps so the
        // attack holds its connections without being a CPU hog that measures itself.
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A child process of this bench holding `n` connections (`HOSTILE_ROLE`).
fn attacker(role: &str, n: usize) -> ! {
    let target = std::env::var("HOSTILE_TARGET").expect("HOSTILE_TARGET");
    match role {
        "unix" => {
            nix::unistd::setuid(nix::unistd::Uid::from_raw(ATTACKER)).expect("setuid");
            hold(n, || {
                let s = UnixStream::connect(&target)?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
        }
        _ => hold(n, || {
            let s = TcpStream::connect(&target)?;
            s.set_nonblocking(true)?;
            Ok(s)
        }),
    }
}

/// Start an attacker child; its last "HELD RECONNECTS" line lands in the two counters.
fn spawn_attacker(
    role: &str,
    target: &str,
    n: usize,
    held: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
) -> std::process::Child {
    let mut child = Command::new(std::env::current_exe().expect("this bench"))
        .env("HOSTILE_ROLE", role)
        .env("HOSTILE_TARGET", target)
        .env("HOSTILE_CONNECTIONS", n.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the attacker starts");
    let out = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let mut it = line.split(' ').filter_map(|x| x.parse::<u64>().ok());
            if let (Some(h), Some(r)) = (it.next(), it.next()) {
                held.store(h, Ordering::Relaxed);
                reconnects.store(r, Ordering::Relaxed);
            }
        }
    });
    child
}

/// `calls` timed `gangctl jobs --all`, as `uid` (root, or an ordinary user who is not the
/// attacker: the one the review asked about, served from the common pool).
fn time_calls(bins: &Path, c: &LocalCluster, calls: usize, uid: u32) -> (f64, f64, usize) {
    use std::os::unix::process::CommandExt;
    let mut ms = vec![];
    let mut failed = 0;
    for _ in 0..calls {
        let t = Instant::now();
        let out = Command::new(bins.join("gangctl"))
            .args(["jobs", "--all"])
            .env("GANG_MASTER", c.master_addr())
            .uid(uid)
            .output()
            .expect("gangctl runs");
        if !out.status.success() {
            failed += 1;
        }
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (median, p99) = median_p99(&mut ms);
    (median, p99, failed)
}

fn main() {
    if let Ok(role) = std::env::var("HOSTILE_ROLE") {
        attacker(&role, env_or("HOSTILE_CONNECTIONS", 0));
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("hostile_connections needs root (connections as another uid)");
        std::process::exit(2);
    }
    let n: usize = env_or("HOSTILE_CONNECTIONS", 20_000);
    let calls: usize = env_or("HOSTILE_CALLS", 200);
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl"]);
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.clone()),
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    // Started before this process raises its limit: the master gets the host's.
    let mut c = LocalCluster::start((1, 1), opts).expect("cluster");
    let pid = c.master_pid().expect("the master runs");
    let master_nofile = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_default();
    let (base_median, base_p99, base_failed) = time_calls(&bins, &c, calls, 0);
    let (base_user_median, base_user_p99, base_user_failed) =
        time_calls(&bins, &c, calls, BYSTANDER);
    let fds_before = open_fds(pid);

    let socket = c.master_addr().trim_start_matches("unix:").to_string();
    let tls = c.grpc_socket().expect("the client port").to_string();
    let counters = || (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let ((held_unix, re_unix), (held_tcp, re_tcp)) = (counters(), counters());
    let mut children = [
        spawn_attacker("unix", &socket, n / 2, held_unix.clone(), re_unix.clone()),
        spawn_attacker("tcp", &tls, n - n / 2, held_tcp.clone(), re_tcp.clone()),
    ];
    // Measure once the attacker holds all it asked for.
    let deadline = Instant::now() + Duration::from_secs(300);
    while held_unix.load(Ordering::Relaxed) + held_tcp.load(Ordering::Relaxed) < n as u64 {
        assert!(
            Instant::now() < deadline,
            "the attacker could not open {n} connections"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (att_median, att_p99, att_failed) = time_calls(&bins, &c, calls, 0);
    let (att_user_median, att_user_p99, att_user_failed) = time_calls(&bins, &c, calls, BYSTANDER);
    let fds_during = open_fds(pid);
    let rss_during = status_kb(pid, "VmRSS:");
    let held = held_unix.load(Ordering::Relaxed) + held_tcp.load(Ordering::Relaxed);
    let reconnects = re_unix.load(Ordering::Relaxed) + re_tcp.load(Ordering::Relaxed);
    for ch in children.iter_mut() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    let metrics = master_counters(&c);
    let line = serde_json::json!({
        "bench": "hostile_connections",
        "connections_held_by_attacker": held,
        "attack": {"unix_socket": n / 2, "tcp": n - n / 2},
        "master_nofile": master_nofile,
        "gangctl_jobs_calls": calls,
        "no_attack_ms": {"median": base_median, "p99": base_p99, "failed": base_failed},
        "under_attack_ms": {"median": att_median, "p99": att_p99, "failed": att_failed},
        "other_user_no_attack_ms":
            {"median": base_user_median, "p99": base_user_p99, "failed": base_user_failed},
        "other_user_under_attack_ms":
            {"median": att_user_median, "p99": att_user_p99, "failed": att_user_failed},
        "master_fds": {"before": fds_before, "during": fds_during},
        "master_rss_kb_during": rss_during,
        "attacker_reconnects": reconnects,
        "refused": metrics,
    });
    println!("{line}");
    c.shutdown().expect("shutdown");
}

/// The master's refusal and expiry counters, as they are at the end.
fn master_counters(c: &LocalCluster) -> serde_json::Value {
    let addr = c.metrics_addr().trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("metrics port");
    use std::io::Write;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    let lines: Vec<String> = text
        .lines()
        .filter(|l| {
            l.starts_with("gang_connections_refused_total")
                || l.starts_with("gang_connections_expired_total")
                || l.starts_with("gang_connections_open")
        })
        .map(str::to_string)
        .collect();
    serde_json::json!(lines)
}
