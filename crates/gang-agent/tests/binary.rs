//! The `gang-agent` binary as a launcher (`gangctl start`, the master's tests) uses it.

mod common;

use std::process::Stdio;

use common::*;
use gang_auth::pki::TlsFiles;
use gang_proto::v1::Stream;
use gang_proto::v1::rank_exit::How;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gang-agent");

/// The TLS flags of an agent with these files.
fn tls_args(files: &TlsFiles) -> Vec<String> {
    vec![
        "--tls-ca".into(),
        files.ca.display().to_string(),
        "--tls-cert".into(),
        files.cert.display().to_string(),
        "--tls-key".into(),
        files.key.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_config_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, "master = \"127.0.0.1:1\"\nx = \"three\"\n").unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env_remove("GANG_MASTER")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(stderr.contains("invalid type"), "{stderr}");

    let out = Command::new(BIN)
        .args(["--x", "1", "--y", "1"])
        .env_remove("GANG_MASTER")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--master"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_files_or_with_another_nodes_the_agent_does_not_start() {
    let out = Command::new(BIN)
        .args(["--master", "127.0.0.1:1", "--x", "1", "--y", "2"])
        .env_remove("GANG_MASTER")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing tls_ca, tls_cert, tls_key")
            && stderr.contains("gangctl certs init DIR --mesh WxH")
            && stderr.contains("DIR/nodes/node-1-2.pem"),
        "{stderr}"
    );

    let pki = TestPki::new();
    let out = Command::new(BIN)
        .args(["--master", "127.0.0.1:1", "--x", "1", "--y", "2"])
        .args(tls_args(&pki.node(0, 0)))
        .env_remove("GANG_MASTER")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node (1,2): refusing to start")
            && stderr.contains("is the certificate of node (0,0), not of node (1,2)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_file_registration_and_clean_sigterm() {
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    // The file gives a coordinate the flags override, and a master address without scheme.
    let tls = registry.pki.node(3, 1);
    std::fs::write(
        &config,
        format!(
            "master = \"{}\"\nx = 9\ny = 9\nkill_grace_ms = 100\nallow_root = true\ntls_ca = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n",
            registry.addr, tls.ca, tls.cert, tls.key
        ),
    )
    .unwrap();
    let ready = dir.path().join("agent.ready");
    let mut agent = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["--x", "3", "--y", "1", "--log-format", "json"])
        .arg("--ready-file")
        .arg(&ready)
        .env_remove("GANG_MASTER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    wait_until("the ready file", || ready.exists()).await;
    let text = std::fs::read_to_string(&ready).unwrap();
    let addr = text
        .strip_prefix("grpc=")
        .and_then(|s| s.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("bad ready file {text:?}"));
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );

    let reg = registry.wait_register(1).await;
    assert_eq!((reg.x, reg.y), (3, 1));
    assert_eq!(reg.address, addr);

    let mut client = registry
        .pki
        .master_client(addr.parse().unwrap(), 3, 1)
        .await;
    let pid = client
        .launch(launch_req(
            1,
            0,
            &["sh", "-c", "sleep 30 & echo $!; sleep 30"],
            "/",
        ))
        .await
        .unwrap()
        .into_inner()
        .pid;
    let out = registry.wait_output(1, 0, Stream::Stdout, "\n").await;
    let grandchild: u32 = out.trim().parse().unwrap();

    kill(Pid::from_raw(agent.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(DEADLINE, agent.wait())
        .await
        .expect("agent exits after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    // The agent reaped its rank, and the rank's group went with it.
    assert_eq!(proc_state(pid), None);
    wait_until("the grandchild to die", || is_dead(grandchild)).await;
    assert_eq!(registry.exit_of(1, 0).await.1, How::Signal(9));
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_die_with_a_killed_agent() {
    let registry = TestRegistry::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut agent = Command::new(BIN)
        .args([
            "--master",
            &registry.url(),
            "--x",
            "0",
            "--y",
            "0",
            "--allow-root",
        ])
        .args(tls_args(&registry.pki.node(0, 0)))
        .arg("--ready-file")
        .arg(&ready)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("the ready file", || ready.exists()).await;
    let text = std::fs::read_to_string(&ready).unwrap();
    let addr = text.trim().strip_prefix("grpc=").unwrap().to_owned();
    let mut client = registry
        .pki
        .master_client(addr.parse().unwrap(), 0, 0)
        .await;
    let pid = client
        .launch(launch_req(1, 0, &["sleep", "30"], "/"))
        .await
        .unwrap()
        .into_inner()
        .pid;
    // SIGKILL: no cleanup code runs; PR_SET_PDEATHSIG must take the rank down.
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    wait_until("the orphaned rank to die", || is_dead(pid)).await;
    registry.stop().await;
}

/// The guard (`gang-agent --guard-ranks`) kills the groups it was told of once its pipe
/// closes (the agent died), and leaves alone those it was told are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_kills_the_listed_groups_when_the_agent_is_gone() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let group = |cmd: &str| {
        std::process::Command::new("sh")
            .args(["-c", cmd])
            .process_group(0)
            .spawn()
            .unwrap()
    };
    // A group with a leader and a child of its own, and one the agent already swept.
    let mut kept = group("sleep 600 & wait");
    let mut released = group("sleep 600");
    let mut guard = std::process::Command::new(BIN)
        .arg(gang_agent::guard::GUARD_ARG)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = guard.stdin.take().unwrap();
    writeln!(pipe, "+{}", kept.id()).unwrap();
    writeln!(pipe, "+{}", released.id()).unwrap();
    writeln!(pipe, "-{}", released.id()).unwrap();
    // SIGTERM to the guard does nothing once it has set up (only the pipe's end does).
    let ignores_term = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", guard.id())).unwrap();
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
            .unwrap();
        mask & (1 << (Signal::SIGTERM as i32 - 1)) != 0
    };
    wait_until("the guard to ignore SIGTERM", ignores_term).await;
    kill(Pid::from_raw(guard.id() as i32), Signal::SIGTERM).unwrap();
    drop(pipe);
    assert!(guard.wait().unwrap().success());
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&kept.wait().unwrap()),
        Some(9),
        "the listed group was killed"
    );
    assert!(
        released.try_wait().unwrap().is_none(),
        "the released group lives"
    );
    released.kill().unwrap();
    released.wait().unwrap();
}
