//! `gangctl start`'s command line: the options parsed here, the cluster started, run and
//! torn down by gang-local's driver ([`gang_local::driver`]).

use std::path::PathBuf;

use clap::Args;
use gang_core::GangMode;
use gang_local::DEFAULT_MAX_AGENTS;
use gang_local::driver::StartPlan;
use gang_local::driver::signals::StopSignals;
use gang_local::hosts::MAX_HOSTS;

use crate::args::gang_mode;
use crate::args::parse::{parse_max_agents, parse_mesh};
use crate::connect::CliError;

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The mesh, as WxH (e.g. 4x4): one agent process per node.
    #[arg(long, value_name = "WxH", value_parser = parse_mesh)]
    pub mesh: (u32, u32),

    /// The most agents (W*H) to start on this machine, at most 1024.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_AGENTS, value_parser = parse_max_agents)]
    pub max_agents: usize,

    /// Emulated nodes, a test tool for fleets larger than this machine: a real master and
    /// real agent code, N nodes to a process (default 1024), whose ranks are played, not
    /// run (true, false, sleep S, echo, hostname, fence ROUNDS BYTES, sh -c 'sleep S; exit
    /// N'). Up to 16,384 nodes; see the README, "Emulated fleets".
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "1024",
        conflicts_with = "hosts",
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub emulate: Option<u32>,

    /// Slices of the Ousterhout matrix (multiprogramming level); default: the master's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub mpl: Option<u32>,

    /// Length of a time slot in ms (gang-master --quantum-ms); default: the master's.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub quantum_ms: Option<u32>,

    /// How jobs that do not choose (prun --gang) are switched (gang-master --gang-mode);
    /// default: the master's.
    #[arg(long, value_name = "MODE", value_parser = gang_mode::parser())]
    pub gang_mode: Option<GangMode>,

    /// An extra gang-master flag (repeat for each word: --master-arg=--table-lead-ms
    /// --master-arg=40).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        conflicts_with = "hosts"
    )]
    pub master_arg: Vec<String>,

    /// An extra flag for every gang-agent (repeat for each word: --agent-arg=--clock
    /// --agent-arg=host).
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        conflicts_with = "hosts"
    )]
    pub agent_arg: Vec<String>,

    /// Emulated hosts: K separate hosts on this machine, each with its own network,
    /// mounts, hostname, machine-id and systemd as PID 1, running the agents from
    /// deploy/gang-agent.service; the master on a host of its own from
    /// deploy/gang-master.service. The mesh is split over the K hosts. Root only.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_HOSTS)))]
    pub hosts: Option<u32>,

    /// With --hosts: each host's wall clock off the real one, the master's host first
    /// (e.g. 0,+40ms,-25ms; ns, us, ms or s; hosts past the list's end keep the real
    /// time). Every process of a host sees it, in reads and absolute timers alike.
    #[arg(long, value_name = "LIST", requires = "hosts", value_delimiter = ',', allow_hyphen_values = true, value_parser = parse_host_offset)]
    pub host_clock_offsets: Vec<i64>,

    /// With --hosts: how fast each host's clock runs off the real one, in parts per
    /// million, the master's host first (e.g. 0,50,-30).
    #[arg(
        long,
        value_name = "LIST",
        requires = "hosts",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub host_drift_ppm: Vec<f64>,

    /// Keep the temporary directory (state, logs) after the cluster stops.
    #[arg(long)]
    pub keep: bool,

    /// Use this directory for state and logs (created if missing, never removed).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Where gang-master and gang-agent are (default: next to gangctl).
    #[arg(long, value_name = "DIR", hide = true)]
    pub bin_dir: Option<PathBuf>,

    /// Serve the web portal (gang-master --portal) and print its URL once the cluster is
    /// up: https://localhost:PORT/portal/, signed in with the token of `gangctl token`.
    #[arg(long)]
    pub portal: bool,

    /// Command to run against the cluster (GANG_MASTER set in its environment).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl StartArgs {
    /// The driver's plan: the command line as gang-local takes it.
    fn plan(mut self) -> StartPlan {
        if self.portal {
            self.master_arg.push("--portal".into());
        }
        StartPlan {
            mesh: self.mesh,
            max_agents: self.max_agents,
            emulate: self.emulate,
            mpl: self.mpl,
            quantum_ms: self.quantum_ms,
            gang_mode: self.gang_mode.map(|g| g.as_str().to_string()),
            master_args: self.master_arg,
            agent_args: self.agent_arg,
            hosts: self.hosts,
            host_clock_offsets: self.host_clock_offsets,
            host_drift_ppm: self.host_drift_ppm,
            keep: self.keep,
            dir: self.dir,
            bin_dir: self.bin_dir,
            command: self.command,
        }
    }
}

/// `gangctl start`, driven by gang-local ([`gang_local::driver`]). `signals` were taken
/// over before any thread started (see [`gang_local::driver::signals`]).
pub async fn start(args: StartArgs, signals: StopSignals) -> Result<i32, CliError> {
    gang_local::driver::start(args.plan(), signals)
        .await
        .map_err(CliError::other)
}

fn parse_host_offset(s: &str) -> Result<i64, String> {
    gang_local::hosts::parse_offset(s)
}
