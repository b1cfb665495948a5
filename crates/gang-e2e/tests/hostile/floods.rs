//! Connection floods by an ordinary local user with no certificate: at the master's agent
//! port across a master restart (agents must come back), and at an agent's own port while
//! another user's job is launched on that node.

use super::*;
use gang_e2e::flood::{Flood, Target, open_fds};

/// 3,000 silent connections held on the master's agent port (every closed one opened
/// again), then the master restarted as admins do: every agent registers again, the
/// victim's job runs on to its end, and the master holds no more descriptors than its
/// bounds allow.
#[test]
fn a_flood_of_the_agent_port_keeps_no_agent_out_across_a_master_restart() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let victim = accounts.user("fv", &[]);
    let mallory = accounts.user("fm", &[]);
    let (mut c, _sockets) = shared_cluster(2, 2, |_| {});
    let out = as_user(
        &c,
        &victim,
        "prun",
        &[
            "-n",
            "2x2",
            "--detach",
            "--",
            "sh",
            "-c",
            "for i in $(seq 1 150); do echo $i; sleep 0.1; done",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    gang_e2e::wait_state(&c, id, "running", LIMIT);
    let agents = c.agents_addr().expect("the agent port");
    let flood = Flood::start(Target::Tcp(agents), 3000, Some((mallory.uid, mallory.gid)));
    gang_e2e::wait_for(LIMIT, "the flood to hold its connections", || {
        (flood.reconnects() > 1000).then_some(())
    });
    c.restart_master().unwrap();
    let t = std::time::Instant::now();
    c.wait_nodes_up(LIMIT).unwrap_or_else(|e| {
        panic!(
            "agents kept out by the flood: {e}; master log:\n{}",
            gang_local::log_tail(&c.master_log(), 40)
        )
    });
    let back = t.elapsed();
    let pid = c.master_pid().expect("the master runs");
    let fds = open_fds(pid);
    let done = gang_e2e::wait_state(&c, id, "completed", LIMIT);
    assert_eq!(done["exit_code"], 0, "{done}");
    let lines = stdout(&gang_e2e::gangctl(&c, &["output", &id.to_string()]));
    let rank = (1..=150).map(|i| format!("{i}\n")).collect::<String>();
    assert_eq!(lines.len(), rank.len() * 4, "every rank's every line");
    eprintln!(
        "agent port flood: {} held, {} reconnected; every agent back {back:?} after the \
         restart; the master holds {fds} descriptors",
        flood.held(),
        flood.reconnects()
    );
    // The unvetted bound (1,024) and the pools, not the flood, size it.
    assert!(fds < 2500, "{fds} descriptors");
    drop(flood);
    c.shutdown().unwrap();
}

/// 3,000 silent connections held on an agent's own port by a user: the agent's
/// descriptors stay bounded, and another user's job launched on that node runs.
#[test]
fn a_flood_of_an_agents_port_does_not_stop_a_launch_there() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let victim = accounts.user("gv", &[]);
    let mallory = accounts.user("gm", &[]);
    let (mut c, _sockets) = shared_cluster(1, 1, |_| {});
    let agent_pid = c.agent_pid(0, 0).expect("the agent runs");
    let port = gang_e2e::wait_for(LIMIT, "the agent's address", || {
        let nodes = gang_e2e::gangctl_json(&c, &["nodes"]).ok()?;
        let list = nodes.as_array().or_else(|| nodes["nodes"].as_array())?;
        let addr = list.first()?["address"].as_str()?.to_string();
        addr.parse::<std::net::SocketAddr>().ok()
    });
    let flood = Flood::start(Target::Tcp(port), 3000, Some((mallory.uid, mallory.gid)));
    gang_e2e::wait_for(LIMIT, "the flood to hold its connections", || {
        (flood.reconnects() > 1000).then_some(())
    });
    let fds = open_fds(agent_pid);
    let out = as_user(
        &c,
        &victim,
        "prun",
        &["-n", "1", "--", "sh", "-c", "echo launched on $GANG_NODE"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "launched on 0,0\n");
    eprintln!(
        "agent's port flood: {} held, {} reconnected; the agent holds {fds} descriptors; a launch there ran",
        flood.held(),
        flood.reconnects()
    );
    assert!(fds < 600, "{fds} descriptors");
    drop(flood);
    c.shutdown().unwrap();
}
