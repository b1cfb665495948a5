//! How to start a local cluster, and the error of an interrupted start.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::ceiling::DEFAULT_MAX_AGENTS;

/// How to start a [`LocalCluster`](crate::LocalCluster).
#[derive(Debug, Clone)]
pub struct LocalClusterOptions {
    /// Slices (multiprogramming level); `None`: the master's default.
    pub mpl: Option<u32>,
    /// Working directory (state, ready files, logs). Created if missing and never removed.
    /// `None`: a fresh temporary directory, removed at shutdown unless `keep`.
    pub dir: Option<PathBuf>,
    /// Keep the temporary directory at shutdown.
    pub keep: bool,
    /// The master's database (`--state`; its output logs go beside it). `None`:
    /// `DIR/state.db`. Never removed at shutdown, e.g. for a database on a file system of
    /// its own.
    pub state: Option<PathBuf>,
    /// Where `gang-master` and `gang-agent` are; `None`: next to the current executable.
    pub bin_dir: Option<PathBuf>,
    /// Extra flags for `gang-master` (e.g. `["--heartbeat-ms", "100"]`).
    pub master_args: Vec<String>,
    /// Extra flags for every `gang-agent`.
    pub agent_args: Vec<String>,
    /// Extra environment for every process (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// How long the master may take to write its ready file.
    pub master_ready_timeout: Duration,
    /// How long until every node must be up.
    pub nodes_up_timeout: Duration,
    /// SIGTERM-to-SIGKILL grace at shutdown.
    pub shutdown_grace: Duration,
    /// Set to `true` (from another thread, e.g. on Ctrl-C) to make a pending
    /// [`LocalCluster::start`](crate::LocalCluster::start) give up within about 25 ms, tear down what it started, and
    /// fail with [`Interrupted`].
    pub interrupt: Option<Arc<AtomicBool>>,
    /// The most agents (nodes) the mesh may have: every node is a process on this
    /// machine. Default [`DEFAULT_MAX_AGENTS`]; at most [`MAX_AGENTS_BOUND`](crate::MAX_AGENTS_BOUND).
    pub max_agents: usize,
    /// Emulated nodes (`gang-agent --emulate`, a test tool for fleets larger than the
    /// machine): `Some(n)` runs the mesh's nodes n to a process (rounded to whole rows),
    /// whose ranks are played, not run; the mesh may then have up to
    /// [`MAX_EMULATED_NODES`](crate::MAX_EMULATED_NODES) nodes. `None` (default): one
    /// agent process per node, under [`max_agents`](Self::max_agents).
    pub emulate: Option<u32>,
    /// Let jobs run as root (the master's `--allow-root-jobs` and the agents'
    /// `--allow-root`). Default: whether this process is root, so a root user's local
    /// cluster runs their jobs; a real cluster refuses them unless configured.
    pub allow_root_jobs: bool,
    /// Where the master's Unix socket goes; `None`: `DIR/master.sock`. The directory is
    /// private (0700: state, keys), so a cluster other local users must reach puts its
    /// socket in a directory they can traverse, as a real master does (`/run/gang`).
    pub socket: Option<PathBuf>,
    /// The address the master's agent port binds; `None`: 127.0.0.1. `0.0.0.0` lets an
    /// agent from outside this host's loopback (another network namespace) register; the
    /// cluster's own agents still dial 127.0.0.1.
    pub agents_listen: Option<IpAddr>,
    /// Agent ports of standby masters (state in etcd): each agent is given them after the
    /// cluster's own master's, and follows whichever leads.
    pub standby_agent_ports: Vec<std::net::SocketAddr>,
    /// Give the agents the standby masters first, the cluster's own master last (to see
    /// them follow a standby's refusal to the leader).
    pub standbys_first: bool,
}

impl Default for LocalClusterOptions {
    fn default() -> Self {
        LocalClusterOptions {
            mpl: None,
            dir: None,
            keep: false,
            state: None,
            bin_dir: None,
            master_args: Vec::new(),
            agent_args: Vec::new(),
            env: Vec::new(),
            master_ready_timeout: Duration::from_secs(15),
            nodes_up_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            interrupt: None,
            max_agents: DEFAULT_MAX_AGENTS,
            emulate: None,
            allow_root_jobs: nix::unistd::geteuid().is_root(),
            socket: None,
            agents_listen: None,
            standby_agent_ports: Vec::new(),
            standbys_first: false,
        }
    }
}

/// [`LocalCluster::start`](crate::LocalCluster::start) gave up because [`LocalClusterOptions::interrupt`] was set;
/// everything it started was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The working directory, if it is left in place (`dir` given, or `keep`).
    pub kept_dir: Option<PathBuf>,
}

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kept_dir {
            None => f.write_str("interrupted"),
            Some(d) => write!(f, "interrupted; state and logs kept in {}", d.display()),
        }
    }
}

impl std::error::Error for Interrupted {}
