//! Watching and stopping a running local cluster: whether every process still lives,
//! waiting until the master lists every node up, and the teardown that leaves nothing
//! behind (on shutdown and on drop).

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use gang_proto::v1::{NodeInfo, NodeState};

use crate::logs::{describe, error_chain, with_tail};
use crate::poll::{block_on, list_nodes, until_set};
use crate::procs::{Proc, stop_all};
use crate::{LocalCluster, MASTER_BIN, POLL};

impl LocalCluster {
    /// Every process still running? An error names the first that is not, with its log.
    pub fn check_alive(&mut self) -> Result<()> {
        let log = self.master_log();
        match self.master.as_mut() {
            None => bail!("{MASTER_BIN} is not running"),
            Some(m) => {
                if let Some(status) = m.poll()? {
                    return Err(with_tail(
                        format!("{MASTER_BIN} {}", describe(status)),
                        &log,
                    ));
                }
            }
        }
        let mut dead = None;
        for (&(x, y), agent) in self.agents.iter_mut() {
            if let Some(status) = agent.poll()? {
                dead = Some((x, y, status));
                break;
            }
        }
        if let Some((x, y, status)) = dead {
            return Err(with_tail(
                format!("the agent of node {x},{y} {}", describe(status)),
                &self.agent_log(x, y),
            ));
        }
        Ok(())
    }

    /// Wait until the master reports every node up, failing early when a process dies.
    pub fn wait_nodes_up(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let url = self.master_url.clone();
        let expected = (self.mesh.0 * self.mesh.1) as usize;
        let mut last: Result<Vec<NodeInfo>> = Err(anyhow!("no answer yet"));
        let flag = self.opts.interrupt.clone();
        loop {
            self.check_interrupt()?;
            self.check_alive()?;
            // A ListNodes call may take seconds on a loaded machine; an interrupt must not
            // wait for it.
            let polled = block_on(async {
                tokio::select! {
                    r = list_nodes(url.clone()) => Some(r),
                    _ = until_set(flag.clone()) => None,
                }
            });
            let Some(polled) = polled else {
                return Err(self.interrupted_error());
            };
            if let Ok(nodes) = &polled
                && nodes.len() >= expected
                && nodes.iter().all(|n| n.state() == NodeState::Up)
            {
                return Ok(());
            }
            match polled {
                Ok(nodes) => last = Ok(nodes),
                Err(e) if last.is_err() => last = Err(e),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                break;
            }
            // In steps, so that an interrupt is seen within one.
            let next = Instant::now() + Duration::from_millis(100);
            while Instant::now() < next && !self.interrupted() {
                std::thread::sleep(POLL);
            }
        }
        let secs = timeout.as_secs_f64();
        match last {
            Err(e) => Err(with_tail(
                format!(
                    "the master at {url} did not list the nodes within {secs} s: {}",
                    error_chain(e.as_ref())
                ),
                &self.master_log(),
            )),
            Ok(nodes) => {
                let mut not_up: Vec<(u32, u32, &'static str)> = Vec::new();
                for y in 0..self.mesh.1 {
                    for x in 0..self.mesh.0 {
                        let state = nodes
                            .iter()
                            .find(|n| n.x == x && n.y == y)
                            .map_or("missing", |n| n.state().label());
                        if state != "up" {
                            not_up.push((x, y, state));
                        }
                    }
                }
                let list: Vec<String> = not_up
                    .iter()
                    .map(|(x, y, s)| format!("{x},{y} ({s})"))
                    .collect();
                let msg = format!("nodes not up after {secs} s: {}", list.join(", "));
                match not_up.first() {
                    Some(&(x, y, _)) => Err(with_tail(msg, &self.agent_log(x, y))),
                    None => Err(anyhow!(msg)),
                }
            }
        }
    }

    /// Stop everything (the agents, then the master: SIGTERM, then SIGKILL after the
    /// grace), reap every process, and remove the directory if it was a temporary one not
    /// kept. An error reports what went wrong (a process that had to be killed or exited
    /// with an error); everything is torn down regardless.
    pub fn shutdown(mut self) -> Result<()> {
        let problems = self.teardown();
        if problems.is_empty() {
            Ok(())
        } else {
            bail!("{}", problems.join("; "))
        }
    }

    fn teardown(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        let grace = self.opts.shutdown_grace;
        let mut problems = Vec::new();
        // Agents first, so that they can still report their ranks' ends to the master;
        // then the master.
        let agents: Vec<(String, Proc)> = std::mem::take(&mut self.agents)
            .into_iter()
            .map(|((x, y), child)| (format!("the agent of node {x},{y}"), child))
            .collect();
        stop_all(agents, grace, &mut problems);
        if let Some(m) = self.master.take() {
            stop_all(vec![(MASTER_BIN.to_string(), m)], grace, &mut problems);
        }
        if self.remove_dir
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            problems.push(format!("cannot remove {}: {e}", self.dir.display()));
        }
        if let Err(e) = std::fs::remove_dir_all(&self.msg_dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            problems.push(format!("cannot remove {}: {e}", self.msg_dir.display()));
        }
        problems
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
