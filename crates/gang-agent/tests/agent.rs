//! The agent library driven end to end: a real agent (gRPC server, registry session,
//! uplink) against a recording AgentRegistry server, launching real processes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use gang_agent::AgentHandle;
use gang_agent::ranks::RankKey;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{RankRef, SignalRequest, StdinRequest, Stream};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;
use tonic::Code;

const X: u32 = 1;
const Y: u32 = 2;

async fn start_agent(registry: &TestRegistry) -> AgentHandle {
    let mut cfg = registry.pki.agent_config(registry, X, Y);
    cfg.kill_grace = Duration::from_millis(3000);
    gang_agent::start(cfg).await.expect("agent starts")
}

/// Registry + agent + a client of the agent.
async fn setup() -> (
    TestRegistry,
    AgentHandle,
    gang_proto::v1::node_agent_client::NodeAgentClient<tonic::transport::Channel>,
) {
    let registry = TestRegistry::start().await;
    let agent = start_agent(&registry).await;
    let client = registry.pki.master_client(agent.addr, X, Y).await;
    (registry, agent, client)
}

fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_carries_coordinate_and_bound_address() {
    let (registry, agent, _client) = setup().await;
    let reg = registry.wait_register(1).await;
    assert_eq!((reg.x, reg.y), (X, Y));
    assert_eq!(reg.address, agent.addr.to_string());
    assert!(reg.running.is_empty());
    // Heartbeats follow at the period the registry asked for.
    registry
        .wait_for("two heartbeats", |events| {
            (events
                .iter()
                .filter(|e| matches!(e, Event::Heartbeat(h) if (h.x, h.y) == (X, Y)))
                .count()
                >= 2)
                .then_some(())
        })
        .await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rank_gets_gang_env_exactly_and_its_cwd() {
    let (registry, agent, mut client) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let mut req = launch_req(11, 3, &sh("pwd; env"), cwd.to_str().unwrap());
    req.env.insert("FOO".into(), "bar baz".into());
    // The agent's own values win over a request's GANG_* entries.
    req.env.insert("GANG_RANK".into(), "bogus".into());
    let pid = client.launch(req).await.unwrap().into_inner().pid;
    assert!(pid > 0);
    let (_, how) = registry.exit_of(11, 3).await;
    assert_eq!(how, How::Code(0));
    let out = output_of(&registry.events(), 11, 3, Stream::Stdout);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(cwd.to_str().unwrap()));
    let env: BTreeMap<&str, &str> = lines.filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env["GANG_JOB_ID"], "11");
    assert_eq!(env["GANG_RANK"], "3");
    assert_eq!(env["GANG_SIZE"], "4");
    assert_eq!(env["GANG_MESH_X"], "1");
    assert_eq!(env["GANG_MESH_Y"], "2");
    assert_eq!(env["GANG_NODE"], "1,2");
    assert_eq!(env["FOO"], "bar baz");
    // The messaging library's: the rank's private directory (gone with the rank) and the
    // job's rectangle.
    let dir = std::path::Path::new(env["GANG_MSG_DIR"]);
    assert!(dir.ends_with("1-2/11.3"), "{dir:?}");
    assert!(!dir.exists(), "{dir:?} outlived the rank");
    assert_eq!(env["GANG_MSG_CONTEXT"], "resident");
    assert!(!env["GANG_HOST_ID"].is_empty());
    // PMI-1 for MPICH (the request named no interface).
    assert_eq!(env["PMI_RANK"], "3");
    assert_eq!(env["PMI_SIZE"], "4");
    assert_eq!(env["PMI_JOBID"], "gang-11");
    assert!(env["PMI_FD"].parse::<i32>().unwrap() > 2);
    // The account of the uid (root here), as the request had none.
    let root = nix::unistd::User::from_uid(0.into()).unwrap().unwrap();
    assert_eq!(
        (env["USER"], env["LOGNAME"], env["HOME"]),
        ("root", "root", root.dir.to_str().unwrap())
    );
    // Nothing of the agent's environment leaks in; only what sh itself adds.
    let allowed = [
        "PATH",
        "FOO",
        "USER",
        "LOGNAME",
        "HOME",
        "GANG_JOB_ID",
        "GANG_RANK",
        "GANG_SIZE",
        "GANG_MESH_X",
        "GANG_MESH_Y",
        "GANG_NODE",
        "GANG_PART",
        "GANG_MSG_DIR",
        "GANG_STATE_FD",
        "GANG_HOST_ID",
        "GANG_MSG_CONTEXT",
        "PMI_FD",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_JOBID",
        "PMI_APPNUM",
        // The PMI progress library (a rank served PMI): checked below.
        "LD_PRELOAD",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
    ];
    for name in env.keys() {
        assert!(
            allowed.contains(name),
            "unexpected variable {name} in {env:?}"
        );
    }
    assert!(
        env["LD_PRELOAD"].contains("/preload/libgang_pmi_progress-"),
        "{}",
        env["LD_PRELOAD"]
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_and_stderr_arrive_complete_in_order_before_the_exit() {
    let (registry, agent, mut client) = setup().await;
    let script = "i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
    client
        .launch(launch_req(1, 0, &sh(script), "/"))
        .await
        .unwrap();
    // More than a batch: crosses the 64 KiB flush.
    client
        .launch(launch_req(1, 1, &["seq", "1", "100000"], "/"))
        .await
        .unwrap();

    let (exit0, how0) = registry.exit_of(1, 0).await;
    let (exit1, how1) = registry.exit_of(1, 1).await;
    assert_eq!((how0, how1), (How::Code(0), How::Code(0)));
    let events = registry.events();
    let want = |prefix: &str| {
        (0..300)
            .map(|i| format!("{prefix}{i}\n"))
            .collect::<String>()
    };
    // All output is among the events *before* each exit report.
    assert_eq!(
        output_of(&events[..exit0], 1, 0, Stream::Stdout),
        want("out")
    );
    assert_eq!(
        output_of(&events[..exit0], 1, 0, Stream::Stderr),
        want("err")
    );
    let seq: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(output_of(&events[..exit1], 1, 1, Stream::Stdout), seq);
    assert_eq!(output_of(&events, 1, 1, Stream::Stderr), "");
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_and_kill_signal_are_reported() {
    let (registry, agent, mut client) = setup().await;
    client
        .launch(launch_req(2, 0, &sh("exit 7"), "/"))
        .await
        .unwrap();
    let pid = client
        .launch(launch_req(2, 1, &["sleep", "30"], "/"))
        .await
        .unwrap()
        .into_inner()
        .pid;
    assert_eq!(registry.exit_of(2, 0).await.1, How::Code(7));
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    assert_eq!(registry.exit_of(2, 1).await.1, How::Signal(9));
    // Reaped by the agent (our process): not even a zombie is left.
    wait_until("the killed rank to be reaped", || proc_state(pid).is_none()).await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_rank_is_not_an_exit() {
    let (registry, agent, mut client) = setup().await;
    let pid = client
        .launch(launch_req(
            3,
            0,
            &sh("echo ready; kill -STOP $$; echo resumed; exit 4"),
            "/",
        ))
        .await
        .unwrap()
        .into_inner()
        .pid;
    wait_until("the rank to stop", || proc_state(pid) == Some('T')).await;
    // While it is stopped, several heartbeats go by, each still listing it as running.
    let seen = registry.events().len();
    registry
        .wait_for("three heartbeats while stopped", |events| {
            let beats: Vec<_> = events[seen..]
                .iter()
                .filter_map(|e| match e {
                    Event::Heartbeat(h) => Some(h),
                    _ => None,
                })
                .collect();
            for h in &beats {
                assert!(
                    h.running.contains(&RankRef { job_id: 3, rank: 0 }),
                    "stopped rank missing from heartbeat {h:?}"
                );
            }
            (beats.len() >= 3).then_some(())
        })
        .await;
    assert_eq!(proc_state(pid), Some('T'));
    assert!(
        !registry
            .events()
            .iter()
            .any(|e| matches!(e, Event::Exit(_))),
        "a stopped rank was reported as exited"
    );
    assert!(agent.node.ranks.is_running(RankKey { job_id: 3, rank: 0 }));

    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    let (at, how) = registry.exit_of(3, 0).await;
    assert_eq!(how, How::Code(4));
    assert_eq!(
        output_of(&registry.events()[..at], 3, 0, Stream::Stdout),
        "ready\nresumed\n"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_kills_a_term_ignorer_after_the_grace() {
    let (registry, agent, mut client) = setup().await;
    client
        .launch(launch_req(
            4,
            0,
            &sh("trap '' TERM; echo armed; sleep 30"),
            "/",
        ))
        .await
        .unwrap();
    registry.wait_output(4, 0, Stream::Stdout, "armed").await;
    let grace = Duration::from_millis(1000);
    let t0 = Instant::now();
    let found = client
        .signal(SignalRequest {
            job_id: 4,
            grace_ms: grace.as_millis() as u32,
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(found);
    assert!(t0.elapsed() < grace, "Signal blocked for the grace period");
    let (_, how) = registry.exit_of(4, 0).await;
    assert!(t0.elapsed() >= grace, "killed before the grace was over");
    assert_eq!(how, How::Signal(9));

    let found = client
        .signal(SignalRequest {
            job_id: 999,
            grace_ms: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(!found);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_continues_a_stopped_rank_so_term_ends_it() {
    let (registry, agent, mut client) = setup().await;
    let pid = client
        .launch(launch_req(5, 0, &sh("kill -STOP $$; sleep 30"), "/"))
        .await
        .unwrap()
        .into_inner()
        .pid;
    wait_until("the rank to stop", || proc_state(pid) == Some('T')).await;
    let t0 = Instant::now();
    client
        .signal(SignalRequest {
            job_id: 5,
            grace_ms: 20_000,
        })
        .await
        .unwrap();
    // Ended by the TERM, long before the grace would have brought the KILL.
    assert_eq!(registry.exit_of(5, 0).await.1, How::Signal(15));
    assert!(t0.elapsed() < Duration::from_secs(10));
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_errors_name_the_node_and_the_os_error() {
    let (_registry, agent, mut client) = setup().await;
    let err = client
        .launch(launch_req(6, 0, &["nosuchcmd"], "/"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        err.message(),
        r#"node (1,2): cannot start "nosuchcmd": No such file or directory (os error 2)"#
    );
    let err = client
        .launch(launch_req(6, 0, &["true"], "/nope"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        err.message(),
        r#"node (1,2): working directory "/nope": No such file or directory (os error 2)"#
    );
    let err = client.launch(launch_req(6, 0, &[], "/")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("node (1,2): "),
        "{}",
        err.message()
    );

    client
        .launch(launch_req(6, 0, &["sleep", "30"], "/"))
        .await
        .unwrap();
    let err = client
        .launch(launch_req(6, 0, &["sleep", "30"], "/"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_grandchildren_are_killed() {
    let (registry, agent, mut client) = setup().await;
    // The background sleep holds the output pipe: without the group sweep the exit would
    // wait for it (and it would live on).
    client
        .launch(launch_req(7, 0, &sh("sleep 30 & echo $!; exit 0"), "/"))
        .await
        .unwrap();
    let (at, how) = registry.exit_of(7, 0).await;
    assert_eq!(how, How::Code(0));
    let out = output_of(&registry.events()[..at], 7, 0, Stream::Stdout);
    let grandchild: u32 = out.trim().parse().expect("grandchild pid");
    wait_until("the grandchild to die", || is_dead(grandchild)).await;
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_forwarded_in_order_and_closed_pipes_are_not_errors() {
    let (registry, agent, mut client) = setup().await;
    let mut req = launch_req(8, 0, &["cat"], "/");
    req.stdin = true;
    client.launch(req).await.unwrap();
    for (data, eof) in [(&b"hello "[..], false), (b"world\n", false), (b"", true)] {
        client
            .stdin(StdinRequest {
                job_id: 8,
                data: data.to_vec(),
                eof,
            })
            .await
            .unwrap();
    }
    let (at, how) = registry.exit_of(8, 0).await;
    assert_eq!(how, How::Code(0));
    assert_eq!(
        output_of(&registry.events()[..at], 8, 0, Stream::Stdout),
        "hello world\n"
    );

    // A rank that closed its stdin: writes to it are lost, quietly.
    let mut req = launch_req(9, 0, &sh("exec 0<&-; echo closed; sleep 30"), "/");
    req.stdin = true;
    client.launch(req).await.unwrap();
    registry.wait_output(9, 0, Stream::Stdout, "closed").await;
    for _ in 0..3 {
        client
            .stdin(StdinRequest {
                job_id: 9,
                data: b"into the void\n".to_vec(),
                eof: false,
            })
            .await
            .unwrap();
    }
    let err = client
        .stdin(StdinRequest {
            job_id: 12345,
            data: b"x".to_vec(),
            eof: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_report_survives_a_registry_restart() {
    let registry = TestRegistry::start().await;
    let addr = registry.addr;
    let agent = start_agent(&registry).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    registry.wait_register(1).await;

    let mut req = launch_req(10, 0, &sh("echo hello; read line; echo bye; exit 3"), "/");
    req.stdin = true;
    client.launch(req).await.unwrap();
    registry.wait_output(10, 0, Stream::Stdout, "hello").await;
    let pki = registry.stop().await;

    // The rank exits while the master is down.
    client
        .stdin(StdinRequest {
            job_id: 10,
            data: b"go\n".to_vec(),
            eof: true,
        })
        .await
        .unwrap();
    let key = RankKey {
        job_id: 10,
        rank: 0,
    };
    wait_until("the rank to be reaped with its exit unacknowledged", || {
        !agent.node.ranks.is_running(key) && !agent.node.ranks.is_empty()
    })
    .await;

    let registry = TestRegistry::start_on(addr, pki, MasterOptions::default()).await;
    let (at, how) = registry.exit_of(10, 0).await;
    assert_eq!(how, How::Code(3));
    // The output that was waiting goes first.
    assert_eq!(
        output_of(&registry.events()[..at], 10, 0, Stream::Stdout),
        "bye\n"
    );
    // And the agent registered again with the new master.
    let reg = registry.wait_register(1).await;
    assert_eq!((reg.x, reg.y, reg.address), (X, Y, agent.addr.to_string()));
    wait_until("the acknowledged exit to be forgotten", || {
        agent.node.ranks.is_empty()
    })
    .await;
    agent.shutdown().await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_master_finds_running_ranks_and_can_have_jobs_killed() {
    let registry = TestRegistry::start().await;
    let addr = registry.addr;
    let agent = start_agent(&registry).await;
    let mut client = registry.pki.master_client(agent.addr, X, Y).await;
    registry.wait_register(1).await;
    client
        .launch(launch_req(20, 0, &["sleep", "30"], "/"))
        .await
        .unwrap();
    client
        .launch(launch_req(21, 0, &["sleep", "30"], "/"))
        .await
        .unwrap();

    // A master that forgot the node (known=false) gets a fresh registration.
    registry.forget_nodes();
    let reg = registry.wait_register(2).await;
    assert_eq!(
        reg.running,
        vec![
            RankRef {
                job_id: 20,
                rank: 0
            },
            RankRef {
                job_id: 21,
                rank: 0
            }
        ]
    );
    let pki = registry.stop().await;

    // A restarted master that no longer runs job 21.
    let registry = TestRegistry::start_on(
        addr,
        pki,
        MasterOptions {
            kill_jobs: vec![21],
            ..MasterOptions::default()
        },
    )
    .await;
    let reg = registry.wait_register(1).await;
    assert_eq!(
        reg.running.len(),
        2,
        "ranks kept running while the master was down"
    );
    assert_eq!(registry.exit_of(21, 0).await.1, How::Signal(15));
    assert!(agent.node.ranks.is_running(RankKey {
        job_id: 20,
        rank: 0
    }));
    agent.shutdown().await;
    assert_eq!(registry.exit_of(20, 0).await.1, How::Signal(9));
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_and_reaps_every_rank() {
    let (registry, agent, mut client) = setup().await;
    let pid = client
        .launch(launch_req(30, 0, &sh("sleep 30 & echo $!; sleep 30"), "/"))
        .await
        .unwrap()
        .into_inner()
        .pid;
    let out = registry.wait_output(30, 0, Stream::Stdout, "\n").await;
    let grandchild: u32 = out.trim().parse().unwrap();
    agent.shutdown().await;
    // Reaped before shutdown returned: gone entirely.
    assert_eq!(proc_state(pid), None);
    wait_until("the grandchild to die", || is_dead(grandchild)).await;
    assert_eq!(registry.exit_of(30, 0).await.1, How::Signal(9));
}
