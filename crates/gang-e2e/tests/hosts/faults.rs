//! Network faults between emulated hosts: a slow, lossy link under gang switching (`tc
//! netem` on both ends of one host's link), and a cut link (the host's port on the
//! switch down). Every host reads the same kernel clock, so the true offset between any
//! two of them is 0: an agent's estimate of the master clock is its error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gang_e2e::{example, gangctl, gangctl_json, job, prun, submit, wait_for, wait_state};
use gang_local::hosts::{EmulatedHosts, HostsOptions, ImageOptions};
use serde_json::Value;

use crate::hosts_with;

const LIMIT: Duration = Duration::from_secs(60);
const AGENT: &str = "gang-agent.service";
const MASTER: &str = "gang-master.service";

/// Emulated hosts whose master has `keys` set over deploy/master.toml's.
fn hosts_keyed(w: u32, h: u32, k: u32, keys: &[(&str, i64)]) -> EmulatedHosts {
    let base = HostsOptions::default();
    let image = ImageOptions {
        master_keys: keys
            .iter()
            .map(|&(k, v)| (k.to_string(), toml::Value::Integer(v)))
            .collect(),
        ..base.image.clone()
    };
    hosts_with(w, h, k, HostsOptions { image, ..base })
}

fn nodes(c: &EmulatedHosts) -> Vec<Value> {
    let v = gangctl_json(c, &["nodes"]).expect("gangctl nodes");
    v["nodes"].as_array().cloned().unwrap_or_default()
}

fn node(c: &EmulatedHosts, (x, y): (u32, u32)) -> Value {
    nodes(c)
        .into_iter()
        .find(|n| n["x"] == x && n["y"] == y)
        .unwrap_or_else(|| panic!("no node ({x},{y})"))
}

/// The host that runs node `n`'s agent.
fn host_of(c: &EmulatedHosts, n: (u32, u32)) -> usize {
    c.layout()
        .hosts
        .iter()
        .position(|h| h.nodes.iter().any(|&(m, _)| m == n))
        .unwrap_or_else(|| panic!("no host runs node {n:?}"))
}

/// Processes whose command line holds `marker` on host `i`.
fn ranks_on(c: &EmulatedHosts, i: usize, marker: &str) -> usize {
    let out = c.exec(i, &["pgrep", "-f", marker]).unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Such processes on every compute host.
fn ranks_anywhere(c: &EmulatedHosts, marker: &str) -> usize {
    (1..=c.layout().hosts.len() - 1)
        .map(|i| ranks_on(c, i, marker))
        .sum()
}

/// The smallest of five TCP handshakes from host `i` to the master's agent port, in ms.
fn connect_ms(c: &EmulatedHosts, i: usize) -> f64 {
    let script = "import socket,time\nbest=1e9\nfor _ in range(5):\n    s=socket.socket(); t=time.monotonic(); s.connect(('master',7472)); best=min(best,time.monotonic()-t); s.close()\nprint(best*1000)";
    let out = c.exec(i, &["python3", "-c", script]).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The agent's log lines on host `i` about slice tables it got after their time, with
/// when they were logged (seconds since the epoch).
fn late_tables(c: &EmulatedHosts, i: usize) -> Vec<(f64, String)> {
    let out = c
        .exec(
            i,
            &["journalctl", "--no-pager", "-o", "short-unix", "-u", AGENT],
        )
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("arrived after its effective time"))
        .filter_map(|l| Some((l.split_whitespace().next()?.parse().ok()?, l.to_string())))
        .collect()
}

/// Late tables by the moment they came: those within half a second of each other are one
/// event (several tables published together, held up together).
fn late_events(late: &[(f64, String)]) -> usize {
    late.iter()
        .zip(std::iter::once(None).chain(late.iter().map(Some)))
        .filter(|((t, _), prev)| prev.is_none_or(|(p, _)| t - p > 0.5))
        .count()
}

fn ns(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// When the first line of `unit`'s journal on host `i` holding every one of `parts` was
/// logged, as seconds since the epoch (journald's receive time; every host reads the
/// same clock as this test).
fn logged_at(c: &EmulatedHosts, i: usize, unit: &str, parts: &[&str]) -> Option<f64> {
    let out = c
        .exec(
            i,
            &["journalctl", "--no-pager", "-o", "short-unix", "-u", unit],
        )
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| parts.iter().all(|p| l.contains(p)))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn epoch_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Node (0,0)'s host gets 50 ms each way and 1% loss each way; two message-checking jobs
/// (ring and halo, every message's sequence and checksum checked) share the 2x2 mesh in
/// two slices of 100 ms. Both complete correctly; no node is ever marked down; the slow
/// agent's clock estimate stays within a few ms of the truth although its probes' round
/// trip is 100 ms; the agents' switches at each boundary stay within a fraction of the
/// quantum of each other, and every agent holds the master's slice table.
#[test]
fn a_slow_lossy_link_keeps_switching_in_sync_and_every_job_right() {
    const QUANTUM_MS: i64 = 100;
    let c = hosts_keyed(2, 2, 4, &[("mpl", 2), ("quantum_ms", QUANTUM_MS)]);
    let slow_node = (0, 0);
    let slow = host_of(&c, slow_node);
    c.set_netem(slow, Some("delay 50ms loss 1%")).unwrap();
    // The agent starts afresh on the slow link: its clock estimate is made there (an
    // estimate kept from before would hide the delay for a window of probes).
    c.systemctl(slow, &["restart", AGENT]).unwrap();
    c.wait_nodes_up(LIMIT).unwrap();
    // The delay is in force: a TCP handshake from the slow host to the master takes a
    // round trip of 100 ms, from another host far less.
    let (rtt_slow, rtt_other) = (connect_ms(&c, slow), connect_ms(&c, host_of(&c, (1, 1))));
    assert!(rtt_slow >= 95.0, "the link is not slow: {rtt_slow} ms");
    assert!(rtt_other < 50.0, "another link is slow: {rtt_other} ms");
    // The restarted agent's probes see it too (its error bound: half the round trip).
    let n = wait_for(
        LIMIT,
        "the slow agent's clock probes to see the delay",
        || {
            let n = node(&c, slow_node);
            (ns(&n["clock_error_ns"]) >= 45_000_000).then_some(n)
        },
    );
    eprintln!("slow link in force: TCP connect {rtt_slow:.1} ms (others {rtt_other:.1} ms); {n}");
    let before = gangctl_json(&c, &["stats"]).unwrap();
    // The agents' switch threads run real-time, as on a real host.
    let log = c.journal(slow, AGENT);
    assert!(log.contains("switch thread running SCHED_FIFO"), "{log}");
    let downs_before = c.journal(0, MASTER).matches("node down").count();
    // (A table received at registration is late by nature: it took effect before.)
    let late_before: Vec<usize> = (1..=4).map(|i| late_tables(&c, i).len()).collect();

    // A watcher: every node's state and clock estimate while the jobs run.
    let stop = AtomicBool::new(false);
    let (ring, halo, seen) = std::thread::scope(|s| {
        // A failure below stops the watcher too (the scope waits for it).
        let _stop = StopOnDrop(&stop);
        let watcher = s.spawn(|| {
            let mut seen = Watch::default();
            while !stop.load(Ordering::SeqCst) {
                for n in nodes(&c) {
                    seen.samples += 1;
                    if n["state"] != "up" {
                        seen.not_up.push(n.to_string());
                    }
                    let off = ns(&n["clock_offset_ns"]).abs();
                    if n["x"] == slow_node.0 && n["y"] == slow_node.1 {
                        seen.slow_offset = seen.slow_offset.max(off);
                        seen.slow_error = seen.slow_error.max(ns(&n["clock_error_ns"]));
                    } else {
                        seen.other_offset = seen.other_offset.max(off);
                    }
                }
                let m = gangctl_json(&c, &["slices"]).unwrap();
                let rows = m["row_slices"].as_array().map_or(0, |r| r.len());
                seen.two_rows |= rows == 2;
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        });
        let ring = s.spawn(|| {
            let ring = example("ring").display().to_string();
            prun(&c, &["-n", "2x2", "--", &ring, "--seconds", "10"], None)
        });
        // One start after the other: each job's first table is a table change of its own.
        wait_for(LIMIT, "the first job running", || {
            let jobs = gangctl_json(&c, &["jobs"]).unwrap();
            jobs.as_array()
                .is_some_and(|j| j.iter().any(|j| j["state"] == "running"))
                .then_some(())
        });
        let halo = s.spawn(|| {
            let halo = example("halo").display().to_string();
            prun(&c, &["-n", "2x2", "--", &halo, "--seconds", "10"], None)
        });
        let (ring, halo) = (ring.join().unwrap(), halo.join().unwrap());
        stop.store(true, Ordering::SeqCst);
        (ring, halo, watcher.join().unwrap())
    });
    for (out, what, shape) in [
        (&ring, "ring", "\"ranks\":4"),
        (&halo, "halo", "\"ranks\":\"2x2\""),
    ] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(shape),
            "{what} over the slow link ({:?}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // They shared the mesh: in two slices at once, each stopped while the other ran.
    let jobs = gangctl_json(&c, &["jobs", "--all"]).unwrap();
    let jobs = jobs.as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(jobs.iter().all(|j| j["state"] == "completed"), "{jobs:?}");
    let overlap = ns(&jobs[0]["end_ns"]).min(ns(&jobs[1]["end_ns"]))
        - ns(&jobs[0]["start_ns"]).max(ns(&jobs[1]["start_ns"]));
    assert!(
        overlap > 5_000_000_000,
        "ran together {overlap} ns: {jobs:?}"
    );
    assert!(seen.two_rows, "never seen in two slices");
    // Each was given about half of the time they were both there.
    for j in &jobs {
        let wall = ns(&j["end_ns"]) - ns(&j["start_ns"]);
        assert!(ns(&j["run_ns"]) < wall * 4 / 5, "not switched: {j}");
    }

    // No node was ever counted down, nor lost by the master.
    assert!(seen.samples > 20, "{} samples", seen.samples);
    assert!(seen.not_up.is_empty(), "nodes not up: {:?}", seen.not_up);
    let log = c.journal(0, MASTER);
    assert_eq!(log.matches("node down").count(), downs_before, "{log}");

    // Switching in sync. The switches went on at every boundary, reported by every
    // agent ...
    let after = gangctl_json(&c, &["stats"]).unwrap();
    let switches = ns(&after["switches_reported"]) - ns(&before["switches_reported"]);
    // 10 s of two 100 ms slots on 4 agents: about 400 switches.
    assert!(switches >= 200, "{switches} switches: {after}");
    // ... the agents' switches at one boundary lie close together on the master clock
    // (skew: the spread of their last signals, times corrected by their offsets) ...
    let skew = &after["skew"];
    assert!(ns(&skew["count"]) >= 40, "{after}");
    assert!(
        ns(&skew["p99_ns"]) < QUANTUM_MS * 1_000_000 / 10,
        "skew p99 {} ms: {after}",
        ms(ns(&skew["p99_ns"]))
    );
    // ... and those offsets are right: the truth is 0, and the slow agent's estimate
    // stays within a small part of its 50 ms error bound.
    assert!(
        seen.slow_offset < 5_000_000,
        "the slow agent's clock is off by {} ms",
        ms(seen.slow_offset)
    );
    assert!(seen.other_offset < 5_000_000, "{}", ms(seen.other_offset));
    // Every agent had the jobs' tables before they took effect, so none switched a slot
    // behind the others: the master's lead covers the slow link's round trips. (Before it
    // did, each job's first table reached the slow agent 20-35 ms late.) A frame of a
    // table, or of a launch ahead of it, lost on the way costs a TCP retransmission,
    // which no lead covers: at 1% loss a run may see one such event on the slow host,
    // never two.
    for (i, before) in (1..=4).zip(&late_before) {
        let late = &late_tables(&c, i)[*before..];
        let allowed = if i == slow { 1 } else { 0 };
        assert!(
            late_events(late) <= allowed,
            "late tables on {}: {late:#?}",
            c.name(i)
        );
    }
    // Every agent holds the master's newest table (a newer one comes as a job ends).
    let deadline = Instant::now() + LIMIT;
    loop {
        let table = ns(&gangctl_json(&c, &["stats"]).unwrap()["table_version"]);
        let all = nodes(&c);
        if all.iter().all(|n| ns(&n["table_version"]) == table) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every agent on the master's table {table}: {all:#?}\nslow agent: {}",
            c.journal(slow, AGENT)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "slow link (50 ms, 1% loss each way on node {slow_node:?}'s host): ring and halo \
         correct; {} node samples, none down; {switches} switches reported, {} dropped; \
         skew p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={}); switch latency p99 {:.2} ms; \
         clock offset (truth 0): slow agent up to {:.3} ms (error bound up to {:.1} ms), \
         others up to {:.3} ms",
        seen.samples,
        ns(&after["switches_dropped"]) - ns(&before["switches_dropped"]),
        ms(ns(&skew["p50_ns"])),
        ms(ns(&skew["p99_ns"])),
        ms(ns(&skew["max_ns"])),
        ns(&skew["count"]),
        ms(ns(&after["switch_latency"]["p99_ns"])),
        ms(seen.slow_offset),
        ms(seen.slow_error),
        ms(seen.other_offset),
    );
    // Frames were lost, where this process carries the link (a kernel without netem).
    if let Some(n) = c.link_counts(slow) {
        eprintln!(
            "the slow link carried {} frames and dropped {} ({:.2}%)",
            n.frames,
            n.dropped,
            n.dropped as f64 * 100.0 / n.frames.max(1) as f64
        );
        assert!(n.dropped > 0, "{n:?}");
    }
    c.set_netem(slow, None).unwrap();
    assert_eq!(c.link_counts(slow), None);
    assert!(connect_ms(&c, slow) < 50.0, "still slow");
    c.shutdown().unwrap();
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Watch {
    samples: usize,
    not_up: Vec<String>,
    slow_offset: i64,
    slow_error: i64,
    other_offset: i64,
    two_rows: bool,
}

/// One host's link cut while two slices switch: in one, a 2x2 job over every host; in
/// the other, a 2x1 job on the cut host and another host, and a 2x1 job on the other two
/// hosts. Both jobs with a rank on the cut host fail naming the node as lost (the master
/// hears the other hosts meanwhile), and the master stops their ranks on the other hosts.
/// The cut host's agent keeps its ranks (the master's lease is minutes: it cannot tell a
/// cut link from a master that is away), and nothing is placed on its node while it is
/// cut: a job that needs it waits, naming it down. The job on the other hosts keeps
/// running and completes. With the link back the agent registers again, is told which
/// jobs ended, and kills their ranks; the node comes up and runs the job that waited.
#[test]
fn a_cut_link_fails_its_jobs_keeps_its_node_out_and_spares_the_rest() {
    let c = hosts_keyed(2, 2, 4, &[("mpl", 2), ("quantum_ms", 100)]);
    let dir = tempfile::Builder::new()
        .prefix("hosts-faults.")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let release = dir.path().join("release");
    // The whole mesh in the first slice; the two 2x1 jobs share the second.
    let whole = submit(&c, "2x2", &["sleep", "614"]);
    wait_state(&c, whole, "running", LIMIT);
    // Waits for the file, then ends well.
    let keep_script = format!(
        ": faults-keep; while [ ! -e {} ]; do sleep 0.1; done; echo kept $GANG_RANK",
        release.display()
    );
    let keep = submit(&c, "2x1", &["sh", "-c", &keep_script]);
    let keep_row = wait_state(&c, keep, "running", LIMIT)["submesh"]["y"].clone();
    let cut_job = submit(&c, "2x1", &["sleep", "613"]);
    let j = wait_state(&c, cut_job, "running", LIMIT);
    assert_ne!(j["submesh"]["y"], keep_row, "{j}");
    let row = j["submesh"]["y"].as_u64().unwrap() as u32;
    let (cut_node, other_node) = ((0, row), (1, row));
    let (cut, other) = (host_of(&c, cut_node), host_of(&c, other_node));
    let kept_hosts: Vec<usize> = (1..=4).filter(|i| ![cut, other].contains(i)).collect();
    wait_for(LIMIT, "every rank in place", || {
        (ranks_on(&c, cut, "sleep 613") == 1
            && ranks_on(&c, other, "sleep 613") == 1
            && ranks_anywhere(&c, "sleep 614") == 4
            && kept_hosts
                .iter()
                .all(|&i| ranks_on(&c, i, "faults-keep") == 1))
        .then_some(())
    });
    // Switching: the slices take turns.
    let before = gangctl_json(&c, &["stats"]).unwrap();
    wait_for(LIMIT, "switches reported", || {
        let now = gangctl_json(&c, &["stats"]).unwrap();
        (ns(&now["switches_reported"]) > ns(&before["switches_reported"]) + 20).then_some(())
    });

    // Cut. Each condition is polled by a thread of its own.
    let cut_wall = SystemTime::now();
    let cut_at = Instant::now();
    c.set_link(cut, false).unwrap();
    let failed_at = |id: u64| {
        wait_for(LIMIT, &format!("job {id} failed"), || {
            let j = job(&c, id);
            (j["state"] == "failed")
                .then(|| (cut_at.elapsed(), j["reason"].as_str().unwrap().to_string()))
        })
    };
    let (down, (failed, reason), (failed_whole, reason_whole)) = std::thread::scope(|s| {
        let down = s.spawn(|| {
            wait_for(LIMIT, "the cut node down", || {
                (node(&c, cut_node)["state"] == "down").then(|| cut_at.elapsed())
            })
        });
        let failed = s.spawn(|| failed_at(cut_job));
        let failed_whole = s.spawn(|| failed_at(whole));
        (
            down.join().unwrap(),
            failed.join().unwrap(),
            failed_whole.join().unwrap(),
        )
    });
    let name = format!("node ({},{})", cut_node.0, cut_node.1);
    for r in [&reason, &reason_whole] {
        assert!(
            r.contains(&name) && r.contains("lost"),
            "the reason names the node: {r}"
        );
    }
    // The master stopped their ranks on the other hosts; the cut host keeps its own.
    wait_for(
        LIMIT,
        "no rank of the failed jobs but on the cut host",
        || (ranks_anywhere(&c, "sleep 613") + ranks_anywhere(&c, "sleep 614") == 2).then_some(()),
    );
    assert_eq!(
        ranks_on(&c, cut, "sleep 61[34]"),
        2,
        "the cut host keeps its ranks"
    );
    // Nothing is placed on the cut node: a job that needs it waits, naming it.
    let waiting = submit(&c, "2x2", &["hostname"]);
    let pending = wait_for(LIMIT, "the whole-mesh job queued", || {
        let j = job(&c, waiting);
        (j["state"] == "queued" && j["pending_reason"].as_str()?.contains("down"))
            .then(|| j["pending_reason"].as_str().unwrap().to_string())
    });
    assert!(
        pending.contains(&format!("({},{})", cut_node.0, cut_node.1)),
        "{pending}"
    );
    // The other job was not touched.
    assert_eq!(job(&c, keep)["state"], "running");
    for &i in &kept_hosts {
        assert_eq!(ranks_on(&c, i, "faults-keep"), 1, "on {}", c.name(i));
    }
    assert_eq!(node(&c, other_node)["state"], "up");

    // Mend it.
    let mended_at = Instant::now();
    c.set_link(cut, true).unwrap();
    wait_for(LIMIT, "the cut node up again", || {
        (node(&c, cut_node)["state"] == "up").then_some(())
    });
    let rejoined = mended_at.elapsed();
    // Registered again, the agent is told which jobs ended and kills their ranks.
    wait_for(
        LIMIT,
        "the failed jobs' ranks killed on the cut host",
        || (ranks_on(&c, cut, "sleep 61[34]") == 0).then_some(()),
    );
    let stopped = mended_at.elapsed();
    let agent_log = c.journal(cut, AGENT);
    assert!(
        agent_log.contains("the master no longer runs this job: killing its ranks here"),
        "{agent_log}"
    );
    assert!(!agent_log.contains("for its whole lease"), "{agent_log}");

    // The kept job runs to its end, as if nothing had happened.
    std::fs::write(&release, b"").unwrap();
    let j = wait_state(&c, keep, "completed", LIMIT);
    assert_eq!(j["exit_code"], 0, "{j}");
    // The job that waited runs on the whole mesh, the rejoined host among them.
    wait_state(&c, waiting, "completed", LIMIT);
    let out = gangctl(&c, &["output", &waiting.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let mut hosts: Vec<&str> = text.lines().map(str::trim).collect();
    hosts.sort();
    assert_eq!(hosts, ["host-1", "host-2", "host-3", "host-4"], "{text}");
    assert_eq!(ranks_anywhere(&c, "faults-keep"), 0);

    // The same moments by the daemons' own logs (journald's receive times).
    let t0 = epoch_s(cut_wall);
    let node_key = format!("{},{}", cut_node.0, cut_node.1);
    let by_log = |i: usize, unit: &str, parts: &[&str]| {
        logged_at(&c, i, unit, parts)
            .map(|t| format!("{:.0} ms", (t - t0) * 1000.0))
            .unwrap_or_else(|| "?".into())
    };
    let master_down = by_log(0, MASTER, &["node down", &node_key]);
    eprintln!(
        "cut link ({}, node {cut_node:?}; node timeout 3000 ms, heartbeat 500 ms, two slices \
         of 100 ms): node down after {} ms (by the master's log {master_down}), jobs failed \
         after {} and {} ms ({reason:?}), the cut host's ranks kept; link back: node up again \
         after {} ms, the ended jobs' ranks there killed after {} ms",
        c.name(cut),
        down.as_millis(),
        failed.as_millis(),
        failed_whole.as_millis(),
        rejoined.as_millis(),
        stopped.as_millis()
    );
    // Within the node timeout and the time to hear another host, with room for a loaded
    // machine.
    assert!(down < Duration::from_secs(8), "{down:?}");
    c.shutdown().unwrap();
}
