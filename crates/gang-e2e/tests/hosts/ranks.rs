//! The messaging library's examples with their ranks on four hosts (a 2x2 mesh, one node
//! a host). Each host has its own machine-id, which the agent gives its ranks as
//! `GANG_HOST_ID`, so the library connects every pair over TCP, between the hosts'
//! addresses, with no `GANG_MSG_TRANSPORT` set. Ring, all-to-all and halo (save-restore)
//! share the mesh in three slices of 10 ms; each checks every message (sequence number and
//! checksum) and its result, and fails on the first wrong one.
//!
//! While they run, the test reads each job whenever all four of its ranks are stopped
//! (every thread in state `T`): their state pages (the boundary each rank quiesced for,
//! the last it passed) and the kernel's queues of their sockets (`wire.rs` of the
//! messaging tests: unread bytes, and TCP bytes one kernel sent and the other has not
//! taken in, the two ends matched by their addresses), read twice around the sockets to
//! be sure nothing moved between. At every boundary all four ranks quiesced for, there
//! must be 0 bytes on the wire; and every TCP connection seen must join two different
//! hosts' addresses.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gang_local::hosts::EmulatedHosts;
use gang_msg::abi::{StatePage, StateSnapshot};
use nix::unistd::Pid;

use crate::{gangctl_json, hosts_keys, ok, prun, shared_dir, wire};

/// One rank of a running job, seen from this machine.
struct Rank {
    pid: i32,
    /// Its host (its root's `/etc/hostname`) and that host's address.
    host: String,
    addr: IpAddr,
    env: HashMap<String, String>,
    /// Its state page, mapped through `/proc/PID/fd/GANG_STATE_FD`.
    state: StatePage,
}

fn environ(pid: i32) -> Option<HashMap<String, String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter_map(|kv| {
                let (k, v) = std::str::from_utf8(kv).ok()?.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect(),
    )
}

/// The `n` ranks of the job running `program`, by rank, once each has started the
/// library (its state page is stamped).
fn ranks_of(c: &EmulatedHosts, program: &Path, n: usize) -> Option<Vec<Rank>> {
    let mut ranks = BTreeMap::new();
    for pid in c.pids() {
        let pid = pid as i32;
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).next() != Some(program.as_os_str().as_bytes()) {
            continue;
        }
        let env = environ(pid)?;
        let rank: usize = env.get("GANG_RANK")?.parse().ok()?;
        let fd = env.get("GANG_STATE_FD")?;
        let state = StatePage::open_read(Path::new(&format!("/proc/{pid}/fd/{fd}"))).ok()?;
        if !state.snapshot().ready {
            return None;
        }
        let host = std::fs::read_to_string(format!("/proc/{pid}/root/etc/hostname"))
            .ok()?
            .trim()
            .to_string();
        let addr = IpAddr::V4(c.layout().hosts.iter().find(|h| h.name == host)?.addr);
        ranks.insert(
            rank,
            Rank {
                pid,
                host,
                addr,
                env,
                state,
            },
        );
    }
    (ranks.len() == n && ranks.keys().copied().eq(0..n)).then(|| ranks.into_values().collect())
}

/// Every thread of `pid` stopped by a signal.
fn stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if !matches!(state, Some('T') | Some('t')) {
            return false;
        }
        any = true;
    }
    any
}

/// One job read while all its ranks were stopped.
struct Look {
    /// The boundary every rank quiesced for, if they all did (and none resumed past it).
    quiesced_for: Option<u64>,
    wire_bytes: u64,
    /// Each rank's TCP connections: (local, peer) addresses.
    tcp: Vec<Vec<(IpAddr, IpAddr)>>,
}

fn snapshots(ranks: &[Rank]) -> Vec<StateSnapshot> {
    ranks.iter().map(|r| r.state.snapshot()).collect()
}

/// Read the job if all its ranks are stopped, and stay so while it is read.
fn look(ranks: &[Rank]) -> Option<Look> {
    if !ranks.iter().all(|r| stopped(r.pid)) {
        return None;
    }
    let before = snapshots(ranks);
    let sockets: Vec<Vec<wire::SocketQueue>> = ranks
        .iter()
        .map(|r| wire::socket_queues(Pid::from_raw(r.pid)).ok())
        .collect::<Option<_>>()?;
    let after = snapshots(ranks);
    // Continued and stopped again meanwhile (a loaded host): its counters moved.
    if before != after || !ranks.iter().all(|r| stopped(r.pid)) {
        return None;
    }
    let b = after[0].quiesced_for_ns;
    let all = b != 0
        && after
            .iter()
            .all(|s| s.quiesced_for_ns == b && s.last_boundary_ns < b);
    Some(Look {
        quiesced_for: all.then_some(b),
        wire_bytes: wire::wire_bytes(sockets.iter().flatten()),
        tcp: sockets
            .iter()
            .map(|socks| {
                socks
                    .iter()
                    .filter_map(|s| s.tcp.as_ref())
                    .map(|t| (t.local.ip(), t.peer.ip()))
                    .collect()
            })
            .collect(),
    })
}

/// What the test saw of one job.
#[derive(Default)]
struct Seen {
    /// Stopped looks, and the boundaries every rank quiesced for, with their wire bytes.
    stopped: usize,
    quiesced: BTreeMap<u64, u64>,
    /// TCP connections seen, per rank.
    tcp: Vec<HashSet<(IpAddr, IpAddr)>>,
    /// Each rank's host, address, GANG_HOST_ID and GANG_MSG_TRANSPORT.
    ranks: Vec<(String, IpAddr, String, Option<String>)>,
}

/// Boundaries every rank of each job must have quiesced for, and been looked at.
const QUIESCED_LOOKS: usize = 10;

#[test]
fn ring_all_to_all_and_halo_on_four_hosts_talk_tcp_and_leave_nothing_on_the_wire() {
    let c = hosts_keys(
        2,
        2,
        4,
        vec![("quantum_ms".into(), toml::Value::Integer(10))],
    );
    let dir = shared_dir("ranks-");
    let stop = dir.path().join("stop");
    let stop_arg = stop.display().to_string();
    // deploy/master.toml's mpl 4: the three 2x2 jobs take three slices of the mesh.
    let jobs: [(&str, &[&str]); 3] = [
        ("ring", &[]),
        ("alltoall", &[]),
        ("halo", &["--context", "save-restore"]),
    ];
    let programs: Vec<PathBuf> = jobs.iter().map(|(n, _)| gang_e2e::example(n)).collect();
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    let (outs, seen) = std::thread::scope(|s| {
        let runs: Vec<_> = jobs
            .iter()
            .zip(&programs)
            .map(|((_, flags), prog)| {
                let (c, done, stop_arg) = (&c, &done, &stop_arg);
                s.spawn(move || {
                    let prog = prog.display().to_string();
                    let args = [
                        &["-n", "2x2"],
                        *flags,
                        &["--", &prog, "--until-file", stop_arg],
                    ]
                    .concat();
                    let out = prun(c, &args);
                    done.fetch_add(1, Ordering::SeqCst);
                    out
                })
            })
            .collect();
        let mut seen: Vec<Seen> = (0..jobs.len()).map(|_| Seen::default()).collect();
        let mut ranks: Vec<Option<Vec<Rank>>> = (0..jobs.len()).map(|_| None).collect();
        // Each job runs a third of the time: its boundaries come every 30 ms. Enough looks
        // come within seconds on an idle host; the deadline is for a loaded one.
        let deadline = started + Duration::from_secs(180);
        let at_least = Duration::from_secs(8);
        while done.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            for j in 0..jobs.len() {
                if ranks[j].is_none() {
                    ranks[j] = ranks_of(&c, &programs[j], 4);
                    if let Some(rs) = &ranks[j] {
                        seen[j].tcp = vec![HashSet::new(); rs.len()];
                        seen[j].ranks = rs
                            .iter()
                            .map(|r| {
                                (
                                    r.host.clone(),
                                    r.addr,
                                    r.env.get("GANG_HOST_ID").cloned().unwrap_or_default(),
                                    r.env.get("GANG_MSG_TRANSPORT").cloned(),
                                )
                            })
                            .collect();
                    }
                }
                let Some(rs) = &ranks[j] else { continue };
                if let Some(l) = look(rs) {
                    let sj = &mut seen[j];
                    sj.stopped += 1;
                    if let Some(b) = l.quiesced_for {
                        sj.quiesced.insert(b, l.wire_bytes);
                    }
                    for (r, conns) in l.tcp.into_iter().enumerate() {
                        sj.tcp[r].extend(conns);
                    }
                }
            }
            if started.elapsed() >= at_least
                && seen.iter().all(|s| s.quiesced.len() >= QUIESCED_LOOKS)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(&stop, b"stop\n").unwrap();
        let outs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
        (outs, seen)
    });
    let ran = started.elapsed();

    // Every message checked, and each example's result.
    let ring = ok(&outs[0], "ring across hosts");
    assert!(ring.contains("\"ranks\":4"), "{ring}");
    ok(&outs[1], "all-to-all across hosts");
    let halo = ok(&outs[2], "halo (save-restore) across hosts");
    assert!(halo.contains("\"ranks\":\"2x2\""), "{halo}");

    for ((name, _), s) in jobs.iter().zip(&seen) {
        // One rank a host, each host its own machine-id, no transport forced.
        assert_eq!(s.ranks.len(), 4, "{name}: its ranks were never all seen");
        let hosts: HashSet<&str> = s.ranks.iter().map(|r| r.0.as_str()).collect();
        let ids: HashSet<&str> = s.ranks.iter().map(|r| r.2.as_str()).collect();
        assert_eq!(hosts.len(), 4, "{name}: {:?}", s.ranks);
        assert_eq!(ids.len(), 4, "{name}: host ids {:?}", s.ranks);
        assert!(
            s.ranks.iter().all(|r| r.3.is_none()),
            "{name}: GANG_MSG_TRANSPORT set: {:?}",
            s.ranks
        );
        // TCP, from this rank's host address to another rank's host.
        let addrs: HashSet<IpAddr> = s.ranks.iter().map(|r| r.1).collect();
        for (r, conns) in s.tcp.iter().enumerate() {
            for &(local, peer) in conns {
                assert_eq!(local, s.ranks[r].1, "{name} rank {r}: {conns:?}");
                assert!(
                    peer != local && addrs.contains(&peer),
                    "{name} rank {r}: connection to {peer}: {conns:?}"
                );
            }
        }
        let tcp: usize = s.tcp.iter().map(HashSet::len).sum();
        let flushed = s.quiesced.len();
        let on_wire: Vec<(&u64, &u64)> = s.quiesced.iter().filter(|(_, w)| **w != 0).collect();
        eprintln!(
            "{name}: {} stopped looks, {flushed} at boundaries every rank quiesced for; {tcp} TCP connection ends seen",
            s.stopped
        );
        assert!(
            flushed >= QUIESCED_LOOKS,
            "{name}: only {flushed} looks at fully quiesced boundaries in {ran:?} ({} stopped looks)",
            s.stopped
        );
        assert!(
            on_wire.is_empty(),
            "{name}: bytes on the wire at boundaries every rank quiesced for: {on_wire:?}"
        );
    }
    // Resident ring and all-to-all keep their connections: seen while stopped, every rank.
    for (j, s) in seen.iter().enumerate().take(2) {
        assert!(
            s.tcp.iter().all(|c| !c.is_empty()),
            "{}: a rank with no TCP connection seen: {:?}",
            jobs[j].0,
            s.tcp
        );
    }

    // The agents switched the jobs at the 10 ms quantum, and counted the flushes.
    let stats = gangctl_json(&c, &["stats"]);
    let switches = stats["switches_reported"].as_u64().unwrap_or(0);
    let flushed = stats["msg_flushed"].as_u64().unwrap_or(0);
    let unflushed = stats["msg_unflushed"].as_u64().unwrap_or(0);
    eprintln!(
        "{ran:?}: {switches} switches reported; ranks switched out {flushed} times flushed, {unflushed} not"
    );
    assert!(
        switches as f64 >= ran.as_secs_f64() * 20.0,
        "{switches} switches in {ran:?}: {stats}"
    );
    assert!(flushed > 0, "{stats}");
    drop(dir);
    c.shutdown().unwrap();
}
