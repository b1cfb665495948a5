//! How the master judges agents alive: heartbeat periods, node timeouts, the agents'
//! lease and the adoption timeout, their defaults (scaled with the mesh) and the rule that
//! they hold together.

/// How often an idle agent heartbeats by default. Measured on emulated fleets (README,
/// "Emulated fleets"): an idle 1,024-node fleet heartbeating every 500 ms kept 0.74 of a
/// core of the master busy; at 5 s a node, an idle node costs a tenth of that, while a
/// node that runs ranks still reports every heartbeat (its ranks' activity feeds the
/// deadlock check) and is still declared lost after the node timeout.
pub const DEFAULT_IDLE_HEARTBEAT_MS: u32 = 5000;
/// The busy heartbeat period and node timeout for up to [`LIVENESS_NODES`] nodes.
pub const DEFAULT_HEARTBEAT_MS: u32 = 500;
pub const DEFAULT_NODE_TIMEOUT_MS: u32 = 3000;
/// The clock probe period agents may grow to, for up to [`LIVENESS_NODES`] nodes (the
/// agents' own default).
pub const DEFAULT_CLOCK_PROBE_MAX_MS: u32 = 8000;
/// Up to this many nodes the defaults above hold; past it they are multiplied by
/// [`liveness_scale`].
pub const LIVENESS_NODES: u64 = 1024;

/// How much longer the default periods and timeouts are for a mesh of `nodes`: one per
/// started 1,024 nodes. Every heartbeat and clock probe is a TLS call that costs the master
/// about 0.15 ms (profiled on a 4,096-node emulated fleet: past the undo journal, the
/// master's time went to answering heartbeats); the defaults keep the master's load at
/// what 1,024 nodes cost at the base rates: at most ~2,000 busy heartbeats a second with
/// every node running ranks, ~200 idle ones and ~130 clock probes. At 10,000 nodes: a busy
/// heartbeat every 5 s and a node timeout of 30 s, an idle one every 50 s (Slurm's
/// `SlurmdTimeout` is 300 s). Set explicitly, the periods are taken as they are.
pub fn liveness_scale(nodes: u64) -> u32 {
    nodes.div_ceil(LIVENESS_NODES).max(1) as u32
}

/// How long an agent keeps its ranks running and switching without an answer of the
/// master (SlurmdTimeout's 300 s): a master paused, swapping, restarting or failing over
/// for less than this loses no job. See `check_liveness` for how it relates to the node
/// timeout.
pub const DEFAULT_AGENT_LEASE_MS: u32 = 300_000;

/// How long agents may take to find a master that just started or took over, beyond the
/// node timeout: an agent whose master hung waits out its call's deadline (5 s) before it
/// tries the next master listed, and may meet a standby not yet elected and come back to
/// the hung one once more. Three masters' worth.
pub const AGENTS_FIND_A_NEW_MASTER_MS: u32 = 15_000;

/// The adoption timeout when none is configured: the node timeout and the time agents
/// take to find a new master, within the agents' lease.
pub fn default_adopt_timeout(node_timeout_ms: u32, agent_lease_ms: u32) -> u32 {
    node_timeout_ms
        .saturating_add(AGENTS_FIND_A_NEW_MASTER_MS)
        .min(agent_lease_ms.saturating_sub(1))
        .max(node_timeout_ms)
}

/// The liveness settings, as `check_liveness` judges them together.
#[derive(Debug, Clone, Copy)]
pub struct LivenessTimes {
    pub heartbeat_ms: u32,
    pub node_timeout_ms: u32,
    pub idle_heartbeat_ms: u32,
    pub idle_node_timeout_ms: u32,
    pub agent_lease_ms: u32,
    pub adopt_timeout_ms: u32,
}

/// Idle keepalives the master waits for, beyond the node timeout, before an idle node
/// is down: one lost or late keepalive on a loaded host does not take a node down.
pub const IDLE_KEEPALIVES_MISSED: u32 = 3;

/// The idle node timeout when none is configured: three idle heartbeats and the node
/// timeout (18 s by default); the node timeout alone when idle agents are not quiet.
pub fn default_idle_node_timeout(idle_heartbeat_ms: u32, node_timeout_ms: u32) -> u32 {
    idle_heartbeat_ms
        .saturating_mul(IDLE_KEEPALIVES_MISSED)
        .saturating_add(if idle_heartbeat_ms == 0 {
            0
        } else {
            node_timeout_ms
        })
        .max(node_timeout_ms)
}

/// The liveness settings hold together: a node is never declared down between two
/// heartbeats it was told to send.
pub fn check_liveness(t: &LivenessTimes) -> Result<(), String> {
    let LivenessTimes {
        heartbeat_ms,
        node_timeout_ms,
        idle_heartbeat_ms,
        idle_node_timeout_ms,
        agent_lease_ms,
        adopt_timeout_ms,
    } = *t;
    if heartbeat_ms == 0 {
        return Err("heartbeat_ms is 0: agents would never report".into());
    }
    if node_timeout_ms <= heartbeat_ms {
        return Err(format!(
            "node_timeout_ms ({node_timeout_ms}) must be longer than heartbeat_ms ({heartbeat_ms}): \
             every node would be declared down between two heartbeats"
        ));
    }
    if idle_heartbeat_ms != 0 && idle_heartbeat_ms < heartbeat_ms {
        return Err(format!(
            "idle_heartbeat_ms ({idle_heartbeat_ms}) is shorter than heartbeat_ms ({heartbeat_ms}): \
             idle agents would report more often than busy ones (0 turns quiet liveness off)"
        ));
    }
    if idle_node_timeout_ms < node_timeout_ms {
        return Err(format!(
            "idle_node_timeout_ms ({idle_node_timeout_ms}) is shorter than node_timeout_ms ({node_timeout_ms})"
        ));
    }
    if idle_heartbeat_ms != 0 && idle_node_timeout_ms <= idle_heartbeat_ms {
        return Err(format!(
            "idle_node_timeout_ms ({idle_node_timeout_ms}) must be longer than idle_heartbeat_ms ({idle_heartbeat_ms}): \
             every idle node would be declared down between two keepalives"
        ));
    }
    // The master gives a node that runs ranks up after the node timeout; its agent gives
    // the master up after the lease. Shorter, an agent cut off would stop ranks of jobs the
    // master still counts as running. (An idle node has no ranks to stop.)
    if agent_lease_ms <= node_timeout_ms {
        return Err(format!(
            "agent_lease_ms ({agent_lease_ms}) must be longer than node_timeout_ms ({node_timeout_ms}): \
             agents would stop ranks of jobs the master still counts as running"
        ));
    }
    // After a start or a takeover, ranks wait this long for their agent to find the
    // master: not less than a running node is given, and not past the agents' lease (an
    // agent cut off would have stopped them by then).
    if adopt_timeout_ms < node_timeout_ms || adopt_timeout_ms >= agent_lease_ms {
        return Err(format!(
            "adopt_timeout_ms ({adopt_timeout_ms}) must be at least node_timeout_ms \
             ({node_timeout_ms}) and shorter than agent_lease_ms ({agent_lease_ms})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_defaults_and_the_settings_that_do_not_hold_together() {
        assert_eq!(default_idle_node_timeout(5000, 3000), 18_000);
        // The defaults hold to 1,024 nodes and grow with each started 1,024 past it.
        let scales: Vec<u32> = [1, 16, 1024, 1025, 4096, 10_000]
            .into_iter()
            .map(liveness_scale)
            .collect();
        assert_eq!(scales, [1, 1, 1, 2, 4, 10]);
        assert_eq!(default_idle_node_timeout(50_000, 30_000), 180_000);
        let times = |heartbeat_ms,
                     node_timeout_ms,
                     idle_heartbeat_ms,
                     idle_node_timeout_ms,
                     agent_lease_ms| LivenessTimes {
            heartbeat_ms,
            node_timeout_ms,
            idle_heartbeat_ms,
            idle_node_timeout_ms,
            agent_lease_ms,
            adopt_timeout_ms: default_adopt_timeout(node_timeout_ms, agent_lease_ms),
        };
        let check = |h, t, ih, it, l| check_liveness(&times(h, t, ih, it, l));
        assert!(check(5000, 30_000, 50_000, 180_000, 300_000).is_ok());
        // Quiet liveness off: the node timeout for every node.
        assert_eq!(default_idle_node_timeout(0, 3000), 3000);
        assert!(check(500, 3000, 5000, 18_000, 300_000).is_ok());
        assert!(check(500, 3000, 0, 3000, 300_000).is_ok());
        let err = |h, t, ih, it| check(h, t, ih, it, 300_000).unwrap_err();
        assert!(
            check(500, 3000, 5000, 18_000, 3000)
                .unwrap_err()
                .contains("agent_lease_ms (3000) must be longer than node_timeout_ms (3000)")
        );
        assert!(check(500, 3000, 5000, 18_000, 10_000).is_ok());
        assert!(err(0, 3000, 0, 3000).contains("heartbeat_ms is 0"));
        assert!(err(500, 500, 0, 500).contains("node_timeout_ms (500) must be longer"));
        assert!(err(500, 3000, 200, 18_000).contains("idle_heartbeat_ms (200) is shorter"));
        assert!(err(500, 3000, 5000, 2000).contains("idle_node_timeout_ms (2000) is shorter"));
        assert!(err(500, 3000, 5000, 4000).contains("must be longer than idle_heartbeat_ms"));
        // Adoption: at least the node timeout, less than the lease.
        let adopt = |ms| {
            check_liveness(&LivenessTimes {
                adopt_timeout_ms: ms,
                ..times(500, 3000, 5000, 18_000, 300_000)
            })
        };
        assert_eq!(default_adopt_timeout(3000, 300_000), 18_000);
        assert_eq!(
            default_adopt_timeout(3000, 10_000),
            9999,
            "within the lease"
        );
        assert!(adopt(3000).is_ok());
        assert!(
            adopt(2999)
                .unwrap_err()
                .contains("adopt_timeout_ms (2999) must be at least")
        );
        assert!(
            adopt(300_000)
                .unwrap_err()
                .contains("shorter than agent_lease_ms (300000)")
        );
    }
}
