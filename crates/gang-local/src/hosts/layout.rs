//! Who lives where on the emulated hosts: pure data, no system calls.
//!
//! Host 0 is the master's; hosts 1..=K run the agents. The mesh's nodes, in row-major
//! order, are cut into K contiguous runs as even as they go (the first hosts take one
//! more), so a 2x2 mesh on 4 hosts is one node a host and a 4x4 on 4 hosts a row each.
//! Every host has one address on the harness's bridge, `10.R.0.(i+1)/24`, and a name
//! (`master`, `host-1`, ...) that every host's `/etc/hosts` resolves.

use std::net::Ipv4Addr;

/// The agents' ports on a host: the first node's agent listens on this one, the next on
/// the port after it.
pub const AGENT_PORT: u16 = 7472;
/// The master's ports (deploy/master.toml's): clients over TLS, metrics, agents.
pub const MASTER_CLIENT_PORT: u16 = 7470;
pub const MASTER_METRICS_PORT: u16 = 7471;
pub const MASTER_AGENT_PORT: u16 = 7472;
/// The most compute hosts one harness starts: each is a systemd and its services.
pub const MAX_HOSTS: u32 = 16;

/// One emulated host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    /// 0 for the master's host, 1..=K for the agents' hosts.
    pub index: u32,
    pub name: String,
    pub addr: Ipv4Addr,
    /// The mesh nodes whose agents run here, with each agent's port.
    pub nodes: Vec<((u32, u32), u16)>,
}

/// The whole set of hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub mesh: (u32, u32),
    /// The bridge's /24: 10.`subnet`.0.0.
    pub subnet: u8,
    pub hosts: Vec<HostPlan>,
}

/// Why a layout cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("--hosts must be at least 1")]
    NoHosts,
    #[error(
        "--hosts {0} is more than this harness starts (at most {MAX_HOSTS}: each is a systemd with its services on this machine)"
    )]
    TooManyHosts(u32),
    #[error("{hosts} hosts for a {w}x{h} mesh: every host needs at least one node (use --hosts {nodes} or fewer)", nodes = w * h)]
    EmptyHosts { hosts: u32, w: u32, h: u32 },
}

impl Layout {
    pub fn new(mesh: (u32, u32), hosts: u32, subnet: u8) -> Result<Layout, LayoutError> {
        let (w, h) = mesh;
        if hosts == 0 {
            return Err(LayoutError::NoHosts);
        }
        if hosts > MAX_HOSTS {
            return Err(LayoutError::TooManyHosts(hosts));
        }
        let nodes = w * h;
        if hosts > nodes {
            return Err(LayoutError::EmptyHosts { hosts, w, h });
        }
        let addr = |i: u32| Ipv4Addr::new(10, subnet, 0, (i + 1) as u8);
        let mut plans = vec![HostPlan {
            index: 0,
            name: "master".to_string(),
            addr: addr(0),
            nodes: Vec::new(),
        }];
        let (base, extra) = (nodes / hosts, nodes % hosts);
        let mut next = 0;
        for i in 0..hosts {
            let count = base + u32::from(i < extra);
            let nodes = (next..next + count)
                .enumerate()
                .map(|(j, n)| ((n % w, n / w), AGENT_PORT + j as u16))
                .collect();
            next += count;
            plans.push(HostPlan {
                index: i + 1,
                name: format!("host-{}", i + 1),
                addr: addr(i + 1),
                nodes,
            });
        }
        Ok(Layout {
            mesh,
            subnet,
            hosts: plans,
        })
    }

    pub fn master(&self) -> &HostPlan {
        &self.hosts[0]
    }

    /// The agents' hosts.
    pub fn compute(&self) -> &[HostPlan] {
        &self.hosts[1..]
    }

    /// The host a node's agent runs on.
    pub fn host_of(&self, node: (u32, u32)) -> Option<&HostPlan> {
        self.compute()
            .iter()
            .find(|h| h.nodes.iter().any(|(n, _)| *n == node))
    }

    /// Every host's `/etc/hosts`: loopback, then each host by name.
    pub fn etc_hosts(&self, me: &HostPlan) -> String {
        let mut s = format!(
            "127.0.0.1\tlocalhost\n127.0.1.1\t{}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            me.name
        );
        for h in &self.hosts {
            s.push_str(&format!("{}\t{}\n", h.addr, h.name));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_cut_into_even_contiguous_runs() {
        let l = Layout::new((4, 2), 3, 77).unwrap();
        let nodes: Vec<Vec<(u32, u32)>> = l
            .compute()
            .iter()
            .map(|h| h.nodes.iter().map(|(n, _)| *n).collect())
            .collect();
        assert_eq!(
            nodes,
            vec![
                vec![(0, 0), (1, 0), (2, 0)],
                vec![(3, 0), (0, 1), (1, 1)],
                vec![(2, 1), (3, 1)]
            ]
        );
        assert_eq!(l.compute()[0].nodes[2].1, AGENT_PORT + 2);
        assert_eq!(l.master().addr, Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(l.compute()[2].addr, Ipv4Addr::new(10, 77, 0, 4));
        assert_eq!(l.host_of((0, 1)).unwrap().name, "host-2");
        assert!(l.host_of((4, 0)).is_none());
    }

    #[test]
    fn one_node_a_host_and_the_limits() {
        let l = Layout::new((2, 2), 4, 9).unwrap();
        assert!(l.compute().iter().all(|h| h.nodes.len() == 1));
        assert_eq!(Layout::new((2, 2), 0, 9), Err(LayoutError::NoHosts));
        assert_eq!(
            Layout::new((2, 2), 5, 9).unwrap_err().to_string(),
            "5 hosts for a 2x2 mesh: every host needs at least one node (use --hosts 4 or fewer)"
        );
        assert!(matches!(
            Layout::new((16, 16), 17, 9),
            Err(LayoutError::TooManyHosts(17))
        ));
    }

    #[test]
    fn every_host_resolves_every_host() {
        let l = Layout::new((2, 1), 2, 5).unwrap();
        let text = l.etc_hosts(&l.hosts[1]);
        assert!(text.contains("10.5.0.1\tmaster\n"), "{text}");
        assert!(text.contains("10.5.0.3\thost-2\n"), "{text}");
        assert!(text.contains("127.0.1.1\thost-1\n"), "{text}");
    }
}
