//! Starting agent processes: one a node, or (emulated nodes) one a block of whole rows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use gang_auth::PeerName;

use crate::{LocalCluster, tls_args};

impl LocalCluster {
    /// The master's agent port, as an agent on this machine reaches it.
    fn agent_port_on_loopback(&self) -> Result<SocketAddr> {
        let mut agents = self
            .agents_port
            .ok_or_else(|| anyhow!("the master's agent port is not known yet"))?;
        if agents.ip().is_unspecified() {
            agents.set_ip(match agents.ip() {
                IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        Ok(agents)
    }

    pub(crate) fn spawn_agent(&mut self, x: u32, y: u32) -> Result<()> {
        let log = self.agent_log(x, y);
        let ready = self.dir.join(format!("agent-{x}-{y}.ready"));
        let _ = std::fs::remove_file(&ready);
        let mut cmd = self.command(&self.agent_bin, &log)?;
        let agents = self.agent_port_on_loopback()?;
        cmd.arg("--master").arg(self.agent_master_arg(agents));
        tls_args(&mut cmd, &self.pki().files(&PeerName::Node { x, y }));
        if self.opts.allow_root_jobs {
            cmd.arg("--allow-root");
        }
        cmd.arg("--x")
            .arg(x.to_string())
            .arg("--y")
            .arg(y.to_string())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--ready-file")
            .arg(&ready)
            .arg("--msg-dir")
            .arg(&self.msg_dir)
            // In the cluster's directory: clusters on one machine never share a spool.
            .arg("--spool-dir")
            .arg(self.dir.join("spool"))
            .args(&self.opts.agent_args);
        let child = self
            .spawner
            .spawn(cmd)
            .with_context(|| format!("cannot run {}", self.agent_bin.display()))?;
        self.agents.insert((x, y), child);
        Ok(())
    }

    /// Start the emulated nodes of rows `y0..y0+rows` in one agent process (keyed `(0, y0)`
    /// among the agents: `agent_pid(0, y0)` is that process).
    pub(crate) fn spawn_emulated(&mut self, y0: u32, rows: u32) -> Result<()> {
        let log = self.dir.join(format!("agents-emulated-{y0}.log"));
        let mut cmd = self.command(&self.agent_bin, &log)?;
        let agents = self.agent_port_on_loopback()?;
        // Each node's files, named by the agent from the {x} and {y} in these paths.
        let mut tls = self.pki().files(&PeerName::Node { x: 0, y: 0 });
        let nodes = tls.cert.parent().map(Path::to_path_buf).unwrap_or_default();
        tls.cert = nodes.join("node-{x}-{y}.pem");
        tls.key = nodes.join("node-{x}-{y}-key.pem");
        cmd.arg("--master").arg(format!("https://{agents}"));
        tls_args(&mut cmd, &tls);
        cmd.arg("--emulate")
            .arg("--emulate-nodes")
            .arg(format!("{}x{rows}", self.mesh.0))
            .arg("--x")
            .arg("0")
            .arg("--y")
            .arg(y0.to_string())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--msg-dir")
            .arg(&self.msg_dir)
            .arg("--spool-dir")
            .arg(self.dir.join("spool"))
            .args(&self.opts.agent_args);
        if self.opts.allow_root_jobs {
            cmd.arg("--allow-root");
        }
        let child = self
            .spawner
            .spawn(cmd)
            .with_context(|| format!("cannot run {}", self.agent_bin.display()))?;
        self.agents.insert((0, y0), child);
        Ok(())
    }

    /// Start the agent of node (x, y) (again, after [`stop_agent`](Self::stop_agent)).
    /// Does not wait for it to register; see [`wait_nodes_up`](Self::wait_nodes_up).
    pub fn start_agent(&mut self, x: u32, y: u32) -> Result<()> {
        if x >= self.mesh.0 || y >= self.mesh.1 {
            bail!(
                "node {x},{y} is outside the {}x{} mesh",
                self.mesh.0,
                self.mesh.1
            );
        }
        if self.agent_pid(x, y).is_some() {
            bail!("the agent of node {x},{y} is already running");
        }
        self.spawn_agent(x, y)
    }
}

impl LocalCluster {
    /// The agents' `--master`: the cluster's master, then any standby masters (or the
    /// other way round: `standbys_first`).
    fn agent_master_arg(&self, agents: SocketAddr) -> String {
        let mut all: Vec<SocketAddr> = std::iter::once(agents)
            .chain(self.opts.standby_agent_ports.iter().copied())
            .collect();
        if self.opts.standbys_first {
            all.rotate_left(1);
        }
        all.iter()
            .map(|a| format!("https://{a}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}
