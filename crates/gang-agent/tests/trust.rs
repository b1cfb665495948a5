//! Who may call an agent, whom it trusts as its master, and whose credentials and
//! environment its ranks get: a real agent with certificates from `Pki::init`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use common::*;
use gang_agent::AgentHandle;
use gang_agent::tls::NodeTls;
use gang_auth::PeerName;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{NodeTable, RegisterRequest, SignalRequest, StdinRequest, Stream};
use tonic::Code;

const X: u32 = 1;
const Y: u32 = 2;
const NOBODY: u32 = 65534;

async fn start_agent(registry: &TestRegistry, allow_root: bool) -> AgentHandle {
    let mut cfg = registry.pki.agent_config(registry, X, Y);
    cfg.allow_root = allow_root;
    cfg.env_allow = ["GCONV_PATH".to_owned()].into();
    gang_agent::start(cfg).await.expect("agent starts")
}

fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

/// A rank's stdout once it exited 0.
async fn output_after_exit(registry: &TestRegistry, job_id: u64) -> String {
    let (at, how) = registry.exit_of(job_id, 0).await;
    let out = output_of(&registry.events()[..at], job_id, 0, Stream::Stdout);
    assert_eq!(how, How::Code(0), "{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_master_may_call_an_agent() {
    let registry = TestRegistry::start().await;
    let agent = start_agent(&registry, true).await;
    let pki = &registry.pki;

    let alice = PeerName::User("alice".into());
    pki.issue(&alice);
    for (who, named) in [
        (PeerName::Node { x: 0, y: 0 }, "node (0,0)"),
        // Even the agent's own certificate: only the master gives orders.
        (PeerName::Node { x: X, y: Y }, "node (1,2)"),
        (alice, "user alice"),
    ] {
        let mut client = pki
            .client_as(Some(&who), agent.addr, X, Y)
            .await
            .expect("the handshake succeeds: the certificate is the CA's");
        let want = format!(
            "node (1,2): only the master may call an agent; the caller's certificate names {named}"
        );
        let errors = [
            client
                .launch(launch_req(1, 0, &["true"], "/"))
                .await
                .unwrap_err(),
            client
                .signal(SignalRequest {
                    job_id: 1,
                    grace_ms: 0,
                })
                .await
                .unwrap_err(),
            client
                .set_table(NodeTable {
                    version: 1,
                    epoch_ns: 0,
                    quantum_ns: 10_000_000,
                    effective_ns: 0,
                    rows: vec![1],
                    parked: vec![],
                })
                .await
                .unwrap_err(),
            client
                .stdin(StdinRequest {
                    job_id: 1,
                    data: b"x".to_vec(),
                    eof: true,
                })
                .await
                .unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.code(), Code::PermissionDenied, "{who}: {e:?}");
            assert_eq!(e.message(), want);
        }
    }

    // No client certificate: the handshake fails, before any service is reached. TLS 1.3
    // reports it to the client at its first request, as the server's alert
    // (CertificateRequired) or, depending on the race with the client's write, as the
    // connection closed under it: a transport error either way, never an answer.
    let e = match pki.client_as(None, agent.addr, X, Y).await {
        Err(e) => tonic::Status::unavailable(format!("{e:?}")),
        Ok(mut client) => client
            .launch(launch_req(1, 0, &["true"], "/"))
            .await
            .unwrap_err(),
    };
    assert!(
        matches!(
            e.code(),
            Code::Unknown | Code::Cancelled | Code::Unavailable
        ) && !e.message().contains("node (1,2)"),
        "not a transport failure: {e:?}"
    );
    assert!(agent.node.ranks.is_empty(), "nothing was launched");
    assert_eq!(agent.node.switch.table_version(), 0, "no table was taken");

    // The master's certificate is let through.
    let mut master = pki.master_client(agent.addr, X, Y).await;
    master
        .launch(launch_req(2, 0, &["true"], "/"))
        .await
        .unwrap();
    assert_eq!(registry.exit_of(2, 0).await.1, How::Code(0));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_another_nodes_certificate_refuses_to_start() {
    let registry = TestRegistry::start().await;
    let mut cfg = registry.pki.agent_config(&registry, X, Y);
    cfg.tls = registry.pki.node(0, 0);
    let e = gang_agent::start(cfg).await.unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.starts_with("node (1,2): refusing to start: ")
            && text.contains("is the certificate of node (0,0), not of node (1,2)"),
        "{text}"
    );
    // A key that is not the certificate's.
    let mut cfg = registry.pki.agent_config(&registry, X, Y);
    cfg.tls.key = registry.pki.node(0, 0).key;
    let e = gang_agent::start(cfg).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("does the key belong to the certificate?")
            && format!("{e:#}").contains("KeyMismatch"),
        "{e:#}"
    );
    assert!(registry.events().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_is_verified_by_its_name() {
    // A server with a certificate of the right CA, but a node's.
    let impostor = TestRegistry::start_with(MasterOptions {
        identity: PeerName::Node { x: 0, y: 0 },
        ..MasterOptions::default()
    })
    .await;
    let tls = NodeTls::load(&impostor.pki.node(X, Y), gang_agent::Coord { x: X, y: Y }).unwrap();
    let mut client =
        gang_agent::session::registry_client::connect(&impostor.url(), tls.client()).unwrap();
    let e = client
        .register(RegisterRequest {
            x: X,
            y: Y,
            address: "127.0.0.1:1".into(),
            running: vec![],
        })
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(
        e.message()
            .contains("certificate not valid for name \"master.gang\""),
        "{text}"
    );
    assert!(impostor.events().is_empty());
    impostor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_run_with_the_requested_uid_gid_and_groups() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let registry = TestRegistry::start().await;
    let agent = start_agent(&registry, false).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    let mut req = launch_req(40, 0, &sh("id -u; id -g; id -G"), "/");
    req.uid = NOBODY;
    req.gid = 4242;
    req.groups = vec![4243, 100];
    client.launch(req).await.unwrap();
    // The kernel keeps supplementary groups sorted; `id -G` lists the gid first.
    assert_eq!(
        output_after_exit(&registry, 40).await,
        "65534\n4242\n4242 100 4243\n"
    );

    // No groups given: none kept (not root's).
    let mut req = launch_req(41, 0, &sh("id -G"), "/");
    req.uid = NOBODY;
    req.gid = NOBODY;
    client.launch(req).await.unwrap();
    assert_eq!(output_after_exit(&registry, 41).await, "65534\n");

    // The working directory is entered as the user: root could, nobody may not.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cwd = dir.path().to_str().unwrap();
    let mut req = launch_req(42, 0, &["true"], cwd);
    req.uid = NOBODY;
    req.gid = NOBODY;
    let e = client.launch(req).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.message(),
        format!(
            "node (1,2): cannot start \"true\" as uid 65534 in {cwd:?}: Permission denied (os error 13)"
        )
    );
    assert!(!agent.node.ranks.is_running(gang_agent::ranks::RankKey {
        job_id: 42,
        rank: 0
    }));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_ranks_are_refused_unless_allowed() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let registry = TestRegistry::start().await;
    let agent = start_agent(&registry, false).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    let mut req = launch_req(50, 0, &["true"], "/");
    req.uid = 0;
    req.gid = 0;
    let e = client.launch(req).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert_eq!(
        e.message(),
        "node (1,2): will not run a rank as root (uid 0): this agent does not allow it (allow_root = false)"
    );
    assert!(agent.node.ranks.is_empty());
    agent.shutdown().await;

    let pki = registry.stop().await;
    let registry = TestRegistry::start_on(
        "127.0.0.1:0".parse().unwrap(),
        pki,
        MasterOptions::default(),
    )
    .await;
    let agent = start_agent(&registry, true).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    let mut req = launch_req(51, 0, &sh("id -u; id -G"), "/");
    req.uid = 0;
    req.gid = 0;
    req.groups = vec![0];
    client.launch(req).await.unwrap();
    assert_eq!(output_after_exit(&registry, 51).await, "0\n0\n");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_policy() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let registry = TestRegistry::start().await;
    let agent = start_agent(&registry, false).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    let mut req = launch_req(60, 0, &["env"], "/");
    req.uid = NOBODY;
    req.gid = NOBODY;
    req.user = "nobody".into();
    for (k, v) in [
        // Dropped: the loader would load it into every process.
        ("LD_PRELOAD", "/nonexistent/hook.so"),
        ("LD_AUDIT", "/nonexistent/audit.so"),
        // Dropped by default, allowed by this agent's env_allow.
        ("GCONV_PATH", "/opt/gconv"),
        // Kept: the user's own processes, the user's own libraries.
        ("LD_LIBRARY_PATH", "/opt/mpi/lib"),
        ("TMPDIR", "/scratch/tmp"),
        ("LOGNAME", "given"),
        // The agent's own variables win.
        ("GANG_NODE", "9,9"),
    ] {
        req.env.insert(k.into(), v.into());
    }
    client.launch(req).await.unwrap();
    let out = output_after_exit(&registry, 60).await;
    let env: BTreeMap<&str, &str> = out.lines().filter_map(|l| l.split_once('=')).collect();
    // The user's is dropped; the agent's own (the PMI progress library) is all there is.
    let preload = env.get("LD_PRELOAD").copied().unwrap_or_default();
    assert!(
        !preload.contains("hook.so") && preload.contains("/preload/libgang_pmi_progress-"),
        "{env:?}"
    );
    assert!(!env.contains_key("LD_AUDIT"), "{env:?}");
    assert_eq!(env["GCONV_PATH"], "/opt/gconv");
    assert_eq!(env["LD_LIBRARY_PATH"], "/opt/mpi/lib");
    assert_eq!(env["TMPDIR"], "/scratch/tmp");
    // Missing ones from nobody's password entry; a given one is kept.
    assert_eq!(
        (env["USER"], env["LOGNAME"], env["HOME"]),
        ("nobody", "given", "/nonexistent")
    );
    assert_eq!(env["GANG_NODE"], "1,2");

    // A name with '=' would reach the loader as another variable.
    let mut req = launch_req(61, 0, &["true"], "/");
    req.uid = NOBODY;
    req.gid = NOBODY;
    req.env.insert("LD_PRELOAD=/tmp/x.so".into(), String::new());
    let e = client.launch(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message()
            .starts_with("node (1,2): environment variable name \"LD_PRELOAD=/tmp/x.so\""),
        "{}",
        e.message()
    );
    agent.shutdown().await;
}
