//! The real `gang-agent` under a stand-in for systemd: a datagram socket named by
//! `$NOTIFY_SOCKET`, as systemd gives a `Type=notify` service, and `$WATCHDOG_USEC`.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

struct Systemd {
    sock: UnixDatagram,
}

impl Systemd {
    fn bind(path: &Path) -> Self {
        Systemd {
            sock: UnixDatagram::bind(path).unwrap(),
        }
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

/// An agent whose master does not answer (nothing listens on port 1).
fn agent(dir: &Path, watchdog_usec: Option<&str>) -> Child {
    let tls = dir.join("tls");
    gang_auth::pki::Pki::init(&tls, 2, 1, 1).unwrap();
    let node = tls.join("nodes");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gang-agent"));
    cmd.args(["--master", "https://127.0.0.1:1", "--x", "1", "--y", "0"])
        .arg("--tls-ca")
        .arg(tls.join("ca.pem"))
        .arg("--tls-cert")
        .arg(node.join("node-1-0.pem"))
        .arg("--tls-key")
        .arg(node.join("node-1-0-key.pem"))
        .args(["--listen", "127.0.0.1:0", "--freezer", "off"])
        .arg("--ready-file")
        .arg(dir.join("ready"))
        .env_remove("GANG_MASTER")
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
    assert!(
        last.last()
            .unwrap()
            .contains("STATUS=stopping: killing and reaping 0 ranks"),
        "{last:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

const T: Duration = Duration::from_secs(30);

#[test]
fn ready_once_bound_without_a_master_then_pings_then_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let systemd = Systemd::bind(&dir.path().join("notify"));
    // 200 ms: a ping every 100 ms.
    let child = agent(dir.path(), Some("200000"));

    let before = systemd.until("READY=1", T);
    assert_eq!(before.len(), 1, "{before:?}");
    // The port is bound (the ready file is written after the bind), and the master was
    // never reached.
    let ready = std::fs::read_to_string(dir.path().join("ready")).unwrap();
    let grpc = ready.trim().strip_prefix("grpc=").unwrap();
    std::net::TcpStream::connect(grpc).unwrap();
    assert_eq!(
        before[0],
        format!("READY=1\nSTATUS=node (1,0): NodeAgent on {grpc}, master https://127.0.0.1:1\n")
    );

    let first = systemd.until("WATCHDOG=1", Duration::from_secs(5));
    assert_eq!(
        first,
        [format!(
            "WATCHDOG=1\nSTATUS=node (1,0): NodeAgent on {grpc}, master https://127.0.0.1:1; 0 ranks here\n"
        )]
    );
    let started = Instant::now();
    for _ in 0..3 {
        assert_eq!(
            systemd.until("WATCHDOG=1", Duration::from_secs(5)),
            ["WATCHDOG=1\n"]
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));

    stop(child, &systemd);
}

#[test]
fn no_watchdog_pings_unless_systemd_asks() {
    let dir = tempfile::tempdir().unwrap();
    let systemd = Systemd::bind(&dir.path().join("notify"));
    let child = agent(dir.path(), None);
    systemd.until("READY=1", T);
    if let Some(m) = systemd.recv(Duration::from_millis(500)) {
        panic!("unasked for: {m:?}");
    }
    stop(child, &systemd);
}
