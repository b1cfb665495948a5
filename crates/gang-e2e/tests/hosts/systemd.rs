//! deploy/'s units in action under a real systemd: readiness, stop, restart after a
//! crash, the watchdog, the journal, and a master that comes back with nothing lost.
//! Host 0 runs gang-master.service; hosts 1 and 2 one gang-agent.service each (nodes
//! (0,0) and (1,0)).

use std::time::{Duration, Instant};

use gang_e2e::{gangctl, job, submit, wait_for, wait_state};
use gang_local::hosts::EmulatedHosts;

use crate::{hosts, on_host};

const AGENT: &str = "gang-agent.service";
const MASTER: &str = "gang-master.service";
const LIMIT: Duration = Duration::from_secs(60);

fn prop(c: &EmulatedHosts, i: usize, unit: &str, p: &str) -> String {
    c.unit_property(i, unit, p).unwrap()
}

fn restarts(c: &EmulatedHosts, i: usize, unit: &str) -> u32 {
    prop(c, i, unit, "NRestarts").parse().unwrap()
}

fn main_pid(c: &EmulatedHosts, i: usize, unit: &str) -> u32 {
    prop(c, i, unit, "MainPID").parse().unwrap()
}

/// Whether anything listens on TCP `port` on host `i`.
fn listening(c: &EmulatedHosts, i: usize, port: u16) -> bool {
    !on_host(c, i, &format!("ss -Hltn 'sport = :{port}'"))
        .trim()
        .is_empty()
}

/// Processes of the job's program (`sleep 3xx`, a length no other process uses) on host i.
fn ranks_on(c: &EmulatedHosts, i: usize, marker: &str) -> usize {
    let out = c.exec(i, &["pgrep", "-f", marker]).unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn wait_job_running(c: &EmulatedHosts, id: u64) {
    wait_state(c, id, "running", LIMIT);
}

#[test]
fn an_agent_is_ready_only_when_it_serves_and_comes_back_by_itself() {
    let c = hosts(2, 1, 2);
    // Its log reached the journal.
    let log = c.journal(1, AGENT);
    assert!(log.contains("registered with the master"), "{log}");
    // `systemctl restart` returns once READY=1 came: the port is bound by then.
    c.systemctl(1, &["restart", AGENT]).unwrap();
    assert!(listening(&c, 1, 7472), "active before it listens");
    // With its port taken it cannot serve: never active, restarted every RestartSec...
    c.systemctl(1, &["stop", AGENT]).unwrap();
    on_host(
        &c,
        1,
        "systemd-run --unit=squatter python3 -c \"import socket,time; s=socket.socket(); s.bind(('0.0.0.0',7472)); s.listen(); time.sleep(600)\"",
    );
    wait_for(LIMIT, "the squatter to listen", || {
        listening(&c, 1, 7472).then_some(())
    });
    let before = restarts(&c, 1, AGENT);
    c.systemctl(1, &["start", "--no-block", AGENT]).unwrap();
    wait_for(LIMIT, "a restart of the agent that cannot bind", || {
        let state = prop(&c, 1, AGENT, "ActiveState");
        assert_ne!(state, "active", "active without its port");
        (restarts(&c, 1, AGENT) > before).then_some(())
    });
    let log = c.journal(1, AGENT);
    assert!(log.contains("7472"), "the failure names the port: {log}");
    // ... and once the port is free it is back on its own, and its node with it.
    c.systemctl(1, &["stop", "squatter"]).unwrap();
    wait_for(LIMIT, "the agent active again", || {
        (prop(&c, 1, AGENT, "ActiveState") == "active").then_some(())
    });
    c.wait_nodes_up(LIMIT).unwrap();
    c.shutdown().unwrap();
}

#[test]
fn systemctl_stop_ends_the_ranks_and_reports_them() {
    let c = hosts(2, 1, 2);
    let id = submit(&c, "2x1", &["sleep", "301"]);
    wait_job_running(&c, id);
    wait_for(LIMIT, "a rank on each host", || {
        (ranks_on(&c, 1, "sleep 301") == 1 && ranks_on(&c, 2, "sleep 301") == 1).then_some(())
    });
    c.systemctl(2, &["stop", AGENT]).unwrap();
    // The agent killed its rank before it exited (KillMode=mixed: it does that itself).
    assert_eq!(ranks_on(&c, 2, "sleep 301"), 0);
    let j = wait_state(&c, id, "failed", LIMIT);
    let why = j.to_string();
    assert!(why.contains("(1,0)"), "the failure names the node: {why}");
    // The master stopped the job's other rank, on the other host.
    wait_for(LIMIT, "the other rank to end", || {
        (ranks_on(&c, 1, "sleep 301") == 0).then_some(())
    });
    c.systemctl(2, &["start", AGENT]).unwrap();
    c.wait_nodes_up(LIMIT).unwrap();
    c.shutdown().unwrap();
}

#[test]
fn a_killed_agent_is_restarted_by_systemd_and_its_node_rejoins() {
    let c = hosts(2, 1, 2);
    let id = submit(&c, "2x1", &["sleep", "302"]);
    wait_job_running(&c, id);
    wait_for(LIMIT, "a rank on each host", || {
        (ranks_on(&c, 1, "sleep 302") == 1 && ranks_on(&c, 2, "sleep 302") == 1).then_some(())
    });
    let pid = main_pid(&c, 2, AGENT);
    let t = Instant::now();
    on_host(&c, 2, &format!("kill -9 {pid}"));
    wait_for(LIMIT, "systemd to restart the agent", || {
        (restarts(&c, 2, AGENT) == 1 && prop(&c, 2, AGENT, "ActiveState") == "active").then_some(())
    });
    assert_ne!(main_pid(&c, 2, AGENT), pid);
    c.wait_nodes_up(LIMIT).unwrap();
    eprintln!("agent kill -9 to node up: {:?}", t.elapsed());
    // As deploy/README.md says: the ranks die with the agent and the job fails.
    wait_state(&c, id, "failed", LIMIT);
    wait_for(LIMIT, "no rank left on either host", || {
        (ranks_on(&c, 1, "sleep 302") + ranks_on(&c, 2, "sleep 302") == 0).then_some(())
    });
    // The node takes work again.
    let next = submit(&c, "2x1", &["true"]);
    wait_state(&c, next, "completed", LIMIT);
    c.shutdown().unwrap();
}

#[test]
fn a_hung_agent_is_killed_by_the_watchdog_and_restarted() {
    let c = hosts(2, 1, 2);
    // The unit's 30 s, shortened as a site would, with a drop-in.
    on_host(
        &c,
        1,
        "mkdir -p /etc/systemd/system/gang-agent.service.d && printf '[Service]\\nWatchdogSec=3s\\n' > /etc/systemd/system/gang-agent.service.d/watchdog.conf && systemctl daemon-reload && systemctl restart gang-agent",
    );
    assert_eq!(prop(&c, 1, AGENT, "WatchdogUSec"), "3s");
    // Pinged while it runs: still up after two intervals.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(restarts(&c, 1, AGENT), 0, "{}", c.journal(1, AGENT));
    let pid = main_pid(&c, 1, AGENT);
    on_host(&c, 1, &format!("kill -STOP {pid}"));
    wait_for(LIMIT, "the watchdog to restart the agent", || {
        (restarts(&c, 1, AGENT) == 1 && prop(&c, 1, AGENT, "ActiveState") == "active").then_some(())
    });
    let log = on_host(&c, 1, "journalctl --no-pager -u gang-agent");
    assert!(log.contains("Watchdog timeout"), "{log}");
    c.wait_nodes_up(LIMIT).unwrap();
    c.shutdown().unwrap();
}

#[test]
fn the_master_comes_back_after_kill_9_with_nothing_lost() {
    let c = hosts(2, 1, 2);
    let running = submit(&c, "2x1", &["sleep", "8"]);
    wait_job_running(&c, running);
    let done = submit(&c, "1x1", &["true"]);
    wait_state(&c, done, "completed", LIMIT);
    let pid = main_pid(&c, 0, MASTER);
    on_host(&c, 0, &format!("kill -9 {pid}"));
    wait_for(LIMIT, "systemd to restart the master", || {
        (restarts(&c, 0, MASTER) == 1 && prop(&c, 0, MASTER, "ActiveState") == "active")
            .then_some(())
    });
    // Both jobs as they were; the running one was not disturbed and completes.
    assert_eq!(job(&c, done)["state"], "completed");
    let j = wait_state(&c, running, "completed", LIMIT);
    assert_eq!(j["exit_code"], 0, "{j}");
    let out = gangctl(&c, &["nodes"]);
    assert!(out.status.success());
    let after = submit(&c, "2x1", &["true"]);
    assert!(after > running, "job ids go on: {after}");
    wait_state(&c, after, "completed", LIMIT);
    c.shutdown().unwrap();
}
