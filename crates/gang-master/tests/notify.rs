//! The real `gang-master` under a stand-in for systemd: a datagram socket named by
//! `$NOTIFY_SOCKET`, as systemd gives a `Type=notify` service, and `$WATCHDOG_USEC`.

mod common;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gang_proto::v1::ListNodesRequest;
use gang_proto::v1::admin_service_client::AdminServiceClient;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

struct Systemd {
    sock: UnixDatagram,
}

impl Systemd {
    fn bind(path: &Path) -> Self {
        let sock = UnixDatagram::bind(path).unwrap();
        Systemd { sock }
    }

    /// The next notification, or None after `within`.
    fn recv(&self, within: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut buf = vec![0; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("{e}"),
        }
    }

    /// Notifications until one contains `line`; that one is returned last.
    fn until(&self, line: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = vec![];
        while Instant::now() < deadline {
            if let Some(m) = self.recv(deadline - Instant::now()) {
                let done = m.lines().any(|l| l == line);
                seen.push(m);
                if done {
                    return seen;
                }
            }
        }
        panic!("no {line} within {within:?}; got {seen:?}");
    }
}

fn master(dir: &Path, watchdog_usec: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gang-master"));
    cmd.args(["--mesh", "2x2"])
        .args(common::local_flags(dir))
        .arg("--state")
        .arg(dir.join("s.db"))
        .arg("--ready-file")
        .arg(dir.join("ready"))
        .env("NOTIFY_SOCKET", dir.join("notify"))
        .env_remove("WATCHDOG_PID")
        .env_remove("WATCHDOG_USEC")
        .stderr(Stdio::null());
    if let Some(usec) = watchdog_usec {
        cmd.env("WATCHDOG_USEC", usec);
    }
    cmd.spawn().unwrap()
}

fn stop(mut child: Child, systemd: &Systemd) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let last = systemd.until("STOPPING=1", Duration::from_secs(10));
    assert!(last.last().unwrap().contains("STATUS=stopping"), "{last:?}");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

const T: Duration = Duration::from_secs(30);

#[test]
fn ready_only_once_serving_then_watchdog_pings_then_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let systemd = Systemd::bind(&dir.path().join("notify"));
    // 200 ms: a ping every 100 ms.
    let child = master(dir.path(), Some("200000"));

    let before = systemd.until("READY=1", T);
    let db = dir.path().join("s.db");
    assert_eq!(
        before[0],
        format!("STATUS=opening {} and recovering jobs\n", db.display()),
        "{before:?}"
    );
    // At READY=1 the port is bound and answers through the state task.
    let ready = std::fs::read_to_string(dir.path().join("ready")).unwrap();
    let grpc = ready.lines().next().unwrap().strip_prefix("grpc=").unwrap();
    let status = before.last().unwrap();
    assert!(
        status.contains(&format!("STATUS=serving gRPC on {grpc}, metrics on "))
            && status.contains("mesh 2x2"),
        "{status}"
    );
    let socket = ready
        .lines()
        .find_map(|l| l.strip_prefix("socket="))
        .unwrap();
    let nodes = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let target = gang_proto::client::Target::Unix(socket.into());
        let ch = gang_proto::client::connect(&target, &Default::default(), T)
            .await
            .unwrap();
        let mut admin = AdminServiceClient::new(ch);
        admin
            .list_nodes(ListNodesRequest {})
            .await
            .unwrap()
            .into_inner()
    });
    assert_eq!(nodes.nodes.len(), 4);

    // Pings, the first with the nodes' state as the status.
    let first = systemd.until("WATCHDOG=1", Duration::from_secs(5));
    assert!(
        first
            .last()
            .unwrap()
            .contains("; 0 of 4 nodes up, 4 down, 0 drained"),
        "{first:?}"
    );
    let started = Instant::now();
    for _ in 0..3 {
        systemd.until("WATCHDOG=1", Duration::from_secs(5));
    }
    assert!(started.elapsed() < Duration::from_secs(5));

    stop(child, &systemd);
}

#[test]
fn no_watchdog_pings_unless_systemd_asks() {
    let dir = tempfile::tempdir().unwrap();
    let systemd = Systemd::bind(&dir.path().join("notify"));
    let child = master(dir.path(), None);
    systemd.until("READY=1", T);
    if let Some(m) = systemd.recv(Duration::from_millis(500)) {
        panic!("unasked for: {m:?}");
    }
    stop(child, &systemd);
}
