//! The master's command line, for the cluster's master and for a second one on the same
//! state in etcd: a standby that leads once the first is gone (`crates/gang-e2e/tests/etcd.rs`,
//! the etcd benches).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use gang_auth::PeerName;

use crate::unit::Unit;
use crate::{LocalCluster, tls_args};

impl LocalCluster {
    /// The master's command line: this cluster's state (or `state`), mesh, TLS files and
    /// token key, on these ports, and its files: (log, socket, ready file).
    pub(crate) fn master_command(
        &self,
        (log, socket, ready): (&Path, &Path, &Path),
        listen: &str,
        metrics: &str,
        agents: SocketAddr,
        state: Option<&str>,
    ) -> Result<Command> {
        let tls = self.pki().files(&PeerName::Master);
        let mut cmd = self.command(&self.master_bin, log)?;
        cmd.arg("--listen")
            .arg(listen)
            .arg("--metrics-listen")
            .arg(metrics)
            .arg("--state")
            .arg(state.map(PathBuf::from).unwrap_or_else(|| {
                self.opts
                    .state
                    .clone()
                    .unwrap_or_else(|| self.dir.join("state.db"))
            }))
            .arg("--mesh")
            .arg(format!("{}x{}", self.mesh.0, self.mesh.1))
            .arg("--agent-listen")
            .arg(agents.to_string())
            .arg("--socket")
            .arg(socket)
            .arg("--token-key")
            .arg(self.dir.join("token.key"));
        tls_args(&mut cmd, &tls);
        if self.opts.allow_root_jobs {
            cmd.arg("--allow-root-jobs");
        }
        if let Some(mpl) = self.opts.mpl {
            cmd.arg("--mpl").arg(mpl.to_string());
        }
        cmd.arg("--ready-file")
            .arg(ready)
            .args(&self.opts.master_args);
        Ok(cmd)
    }

    /// A second master on the same state (in etcd) and files (TLS, token key) as this
    /// cluster's, on the given ports and socket, logging to `log`: it stands by until it
    /// leads, and is started again when it steps down, as its unit would (`unit::Unit`).
    /// Not tracked by the cluster: the caller owns (and stops) it.
    pub fn standby_master(
        &self,
        listen: SocketAddr,
        agents: SocketAddr,
        socket: &Path,
        ready: &Path,
        log: &Path,
    ) -> Result<Unit> {
        let cmd = self.standby_command(listen, agents, socket, ready, log, None)?;
        Unit::start(&cmd, log).with_context(|| format!("cannot run {}", self.master_bin.display()))
    }

    /// The command of [`LocalCluster::standby_master`], on `state` if given (etcd reached
    /// by other addresses), to be changed further before it runs (started in another
    /// network namespace).
    pub fn standby_command(
        &self,
        listen: SocketAddr,
        agents: SocketAddr,
        socket: &Path,
        ready: &Path,
        log: &Path,
        state: Option<&str>,
    ) -> Result<Command> {
        let mut cmd = self.master_command(
            (log, socket, ready),
            &listen.to_string(),
            "127.0.0.1:0",
            agents,
            state,
        )?;
        // Gone with the thread that started it, should the test or bench die first.
        // SAFETY: only prctl, async-signal-safe, between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        Ok(cmd)
    }
}
