//! Who may do what, end to end: real Unix users against the master's socket, tokens and
//! certificates on its TLS port, certificates between the master and its agents, and an
//! agent cut off from the master in a network namespace. Runs as root (useradd, ip netns).

mod accounts;
mod agents;
mod allocations;
mod authorization;
mod cut_link;
mod netns;
mod output_files;
mod remote;
mod tls;
mod tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use accounts::{
    Accounts, TestUser, channel_as, command_as, on_thread_as, output_within, output_within_stdin,
};
use gang_auth::PeerName;
use gang_auth::token::TokenKey;
use gang_e2e::{
    bin_dir, gangctl, gangctl_json, options, prun, rank_pids, wait_for, wait_state, without_colours,
};
use gang_local::{LocalCluster, LocalClusterOptions, log_tail};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::agent_registry_client::AgentRegistryClient;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::node_relay_client::NodeRelayClient;
use gang_proto::v1::{
    AttachRequest, CancelRequest, GetJobRequest, HeartbeatRequest, JobSpec, JobState,
    LaunchRequest, ListJobsRequest, ListNodesRequest, NodeRequest, NodeState, RankExit,
    RegisterRequest, SignalRequest, SubmitRequest, WatchRequest, attach_response,
};
use gang_proto::v1::{FenceUpRequest, RelayOrder, RelayRequest, relay_order};
use netns::Netns;
use nix::sys::signal::Signal;
use prost::Message;
use tonic::Code;

/// Bounds a wait that normally takes well under a second.
const T: Duration = Duration::from_secs(20);
/// The longest any one command may take.
const LIMIT: Duration = Duration::from_secs(60);

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn cluster_with(w: u32, h: u32, change: impl FnOnce(&mut LocalClusterOptions)) -> LocalCluster {
    let mut opts = options(&[]);
    change(&mut opts);
    LocalCluster::start((w, h), opts).expect("local cluster starts")
}

/// A directory other users may traverse, for the master's socket (as /run/gang is): the
/// tests do not depend on the mode of the cluster's own directory (state, keys).
fn socket_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("gang-trust-sock-")
        .tempdir()
        .expect("temporary directory");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the socket directory");
    d
}

/// `prun` or `gangctl` run by `u` against `c`'s socket.
fn as_user(c: &LocalCluster, u: &TestUser, bin: &str, args: &[&str]) -> Output {
    let mut cmd = command_as(&bin_dir().join(bin), u);
    cmd.env("GANG_MASTER", c.master_addr()).args(args);
    output_within(&mut cmd, LIMIT)
}

/// `prun --detach` as `u`: the job id.
fn submit_as(c: &LocalCluster, u: &TestUser, argv: &[&str]) -> u64 {
    let out = as_user(
        c,
        u,
        "prun",
        &[&["-n", "1", "--detach", "--"], argv].concat(),
    );
    assert!(out.status.success(), "{}: {}", u.name, stderr(&out));
    stdout(&out)
        .trim()
        .parse()
        .expect("prun --detach prints the job id")
}

fn ids(jobs: &serde_json::Value) -> BTreeSet<u64> {
    jobs.as_array()
        .expect("a list of jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("an id"))
        .collect()
}

/// The jobs `gangctl jobs` lists for `u`.
fn jobs_as(c: &LocalCluster, u: &TestUser) -> BTreeSet<u64> {
    let out = as_user(c, u, "gangctl", &["--output", "json", "jobs", "--all"]);
    assert!(out.status.success(), "{}: {}", u.name, stderr(&out));
    ids(&serde_json::from_slice(&out.stdout).expect("JSON"))
}

fn assert_denied(e: &tonic::Status, want: &str) {
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(e.message(), want);
}

/// Users and network namespaces need root; without it a test says so and passes, as the
/// agent's root-only tests do.
fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root (useradd, ip netns)");
    }
    root
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}
