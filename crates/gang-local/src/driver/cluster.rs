//! What `gangctl start` runs, a local cluster or emulated hosts (`--hosts`), behind one
//! face: its address, pids, health, teardown and the "cluster up" lines.

use std::path::PathBuf;

use crate::LocalCluster;
use crate::hosts::EmulatedHosts;
use crate::logs::error_chain;

/// What `gangctl start` runs: a local cluster, or emulated hosts (`--hosts`).
pub(super) enum Cluster {
    Local(Box<LocalCluster>),
    Hosts(Box<EmulatedHosts>),
}

impl Cluster {
    pub(super) fn master_addr(&self) -> String {
        match self {
            Cluster::Local(c) => c.master_addr().to_string(),
            Cluster::Hosts(c) => c.master_addr(),
        }
    }

    pub(super) fn mesh(&self) -> (u32, u32) {
        match self {
            Cluster::Local(c) => c.mesh(),
            Cluster::Hosts(c) => c.layout().mesh,
        }
    }

    pub(super) fn dir(&self) -> PathBuf {
        match self {
            Cluster::Local(c) => c.dir().to_path_buf(),
            Cluster::Hosts(c) => c.dir().to_path_buf(),
        }
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        match self {
            Cluster::Local(c) => c.pids(),
            Cluster::Hosts(c) => c.pids(),
        }
    }

    pub(super) fn check_alive(&mut self) -> Result<(), String> {
        match self {
            Cluster::Local(c) => c.check_alive(),
            Cluster::Hosts(c) => c.check_alive(),
        }
        .map_err(|e| error_chain(e.as_ref()))
    }

    fn shutdown(self) -> Result<(), String> {
        match self {
            Cluster::Local(c) => c.shutdown(),
            Cluster::Hosts(c) => c.shutdown(),
        }
        .map_err(|e| error_chain(e.as_ref()))
    }

    /// The "cluster up" lines.
    pub(super) fn describe(&self) -> String {
        match self {
            Cluster::Local(c) => {
                let (w, h) = c.mesh();
                let mut s = format!(
                    "cluster up: {w}x{h} mesh, master at {}, metrics at {}, logs in {}",
                    c.master_addr(),
                    c.metrics_url(),
                    c.dir().display()
                );
                if let Some(url) = c.portal_url() {
                    s.push_str(&format!(
                        "\ngangctl: portal at {url} (sign in with the token `gangctl token` \
                         prints; the page's certificate is signed by this cluster's CA, {}: \
                         import it into the browser, or accept the warning)",
                        c.ca().display()
                    ));
                }
                s
            }
            Cluster::Hosts(c) => describe_hosts(c),
        }
    }
}

/// The "cluster up" lines of emulated hosts: one line for the cluster, one a host.
fn describe_hosts(c: &EmulatedHosts) -> String {
    let (w, h) = c.layout().mesh;
    let mut s = format!(
        "cluster up on {} emulated hosts: {w}x{h} mesh, master at {}, files in {}",
        c.layout().hosts.len(),
        c.master_addr(),
        c.dir().display()
    );
    for (i, plan) in c.layout().hosts.iter().enumerate() {
        let what = if i == 0 {
            "gang-master.service".to_string()
        } else {
            plan.nodes
                .iter()
                .map(|((x, y), _)| format!("({x},{y})"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        s.push_str(&format!(
            "\n  {:<8} {:<12} {what}   (enter: nsenter -t {} -a; logs: journalctl there)",
            plan.name,
            plan.addr,
            c.init_pid(i)
        ));
    }
    s
}

/// Tear the cluster down (signals meanwhile wait in their channel: the teardown is
/// bounded by the shutdown grace).
pub(super) async fn stop_cluster(cluster: Cluster, keep: bool) {
    let dir = cluster.dir();
    match tokio::task::spawn_blocking(move || cluster.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("gangctl: stopping the cluster: {e}"),
        Err(e) => eprintln!("gangctl: stopping the cluster: {e}"),
    }
    if keep {
        eprintln!("gangctl: state and logs kept in {}", dir.display());
    }
}
