//! A hostile user on a shared machine: every test performs an attack through the real
//! binaries, as an ordinary Unix user (made for the test), against a real local cluster
//! whose master and agents run as root, and checks that the agent, the master and other
//! users' jobs come through. Runs as root (useradd); without it each test says so and
//! passes, as the trust suite does.
//!
//! The admin guide's "Hostile users" table (`docs/admin-guide.md`) lists each attack, the expected answer and the test
//! that performs it.

// Shared with the trust suite; not every helper of it is used here.
#[allow(dead_code)]
#[path = "../trust/accounts.rs"]
mod accounts;
mod fair_share;
mod floods;
mod logs;
mod neighbours;
mod pages_and_descriptors;
mod paths;
mod requests;
mod scripts;

use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::Duration;

use accounts::{Accounts, TestUser, command_as, output_within};
use gang_e2e::{bin_dir, options};
use gang_local::{LocalCluster, LocalClusterOptions};

/// The longest any one command may take.
const LIMIT: Duration = Duration::from_secs(60);

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Useradd needs root; without it a test says so and passes.
fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root (useradd)");
    }
    root
}

/// A cluster whose master socket is in a directory every user may traverse (as
/// /run/gang is), with `change` applied to the options. Returns the directory too, which
/// must outlive the cluster.
fn shared_cluster(
    w: u32,
    h: u32,
    change: impl FnOnce(&mut LocalClusterOptions),
) -> (LocalCluster, tempfile::TempDir) {
    let sockets = tempfile::Builder::new()
        .prefix("gang-hostile-sock-")
        .tempdir()
        .expect("temporary directory");
    std::fs::set_permissions(sockets.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the socket directory");
    let mut opts = options(&[]);
    opts.socket = Some(sockets.path().join("master.sock"));
    change(&mut opts);
    let c = LocalCluster::start((w, h), opts).expect("local cluster starts");
    (c, sockets)
}

/// `prun` or `gangctl` run by `u` against `c`'s socket.
fn as_user(c: &LocalCluster, u: &TestUser, bin: &str, args: &[&str]) -> Output {
    let mut cmd = command_as(&bin_dir().join(bin), u);
    cmd.env("GANG_MASTER", c.master_addr()).args(args);
    output_within(&mut cmd, LIMIT)
}

/// Declared first in a test, dropped last: after the cluster and the ranks of its users.
fn accounts() -> Accounts {
    Accounts::new()
}

/// A 1-node job submitted through the API as `u` (what a portal or script of theirs
/// would send), with the working directory `cwd`: its id.
fn submit_as(socket: &std::path::Path, u: &TestUser, argv: &[&str], cwd: &str) -> u64 {
    use gang_proto::v1::job_service_client::JobServiceClient;
    use gang_proto::v1::{JobSpec, SubmitRequest};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut jobs = JobServiceClient::new(accounts::channel_as(socket, u).await);
        jobs.submit(SubmitRequest {
            spec: Some(JobSpec {
                shape: "1".into(),
                argv: argv.iter().map(|s| s.to_string()).collect(),
                cwd: cwd.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("the submission is accepted")
        .into_inner()
        .job
        .expect("the job")
        .id
    })
}

/// After an attack: every daemon alive, node (0,0)'s agent the same process as before
/// (`agent`), and `u`'s next job runs there.
fn assert_agent_carries_on(c: &mut LocalCluster, agent: u32, u: &TestUser) {
    c.check_alive().expect("every daemon is alive");
    assert_eq!(c.agent_pid(0, 0), Some(agent), "the agent was replaced");
    let out = as_user(c, u, "prun", &["-n", "1", "--", "echo", "next"]);
    assert_eq!(stdout(&out), "next\n", "{}", stderr(&out));
}
