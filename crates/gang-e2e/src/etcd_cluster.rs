//! A real etcd cluster on loopback for the tests of masters that keep their state in it:
//! `n` members of Debian's `etcd` (etcd-server), each with its own data directory and
//! ports, started together; a member can be killed and started again.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    /// Plain HTTP for /health, whether clients speak TLS or not.
    metrics: SocketAddr,
    child: Option<Child>,
}

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    /// Another address each member takes clients on, on its loopback port's number.
    also: Option<std::net::Ipv4Addr>,
    /// Clients speak TLS and must show a certificate of the cluster's CA.
    tls: bool,
}

/// The files of a TLS etcd cluster's clients: its CA, a client certificate and its key.
pub struct ClientTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn write_pki(dir: &std::path::Path) -> Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        SanType,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca_cert.pem())?;
    let issuer = Issuer::new(ca, ca_key);
    for (name, usage) in [
        ("server", ExtendedKeyUsagePurpose::ServerAuth),
        ("client", ExtendedKeyUsagePurpose::ClientAuth),
    ] {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec!["localhost".to_string()])?;
        p.subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &issuer)?;
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem())?;
    }
    Ok(())
}

/// A loopback port free now (the kernel's pick, released for the caller to bind).
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

impl EtcdCluster {
    /// Start `n` members and wait until the cluster answers. Short election timeouts
    /// (500 ms) make a lost raft leader, and the shortest lease (1 s), quick.
    pub fn start(n: usize) -> Result<EtcdCluster> {
        Self::start_also_on(n, None)
    }

    /// As [`EtcdCluster::start`], each member also taking clients on `also` (a link to
    /// another network namespace), on the same port number.
    pub fn start_also_on(n: usize, also: Option<std::net::Ipv4Addr>) -> Result<EtcdCluster> {
        Self::start_with(n, also, false)
    }

    /// As [`EtcdCluster::start`], clients speaking TLS to the members and showing a
    /// certificate of the cluster's CA (`--client-cert-auth`): see [`EtcdCluster::client_tls`].
    pub fn start_tls(n: usize) -> Result<EtcdCluster> {
        Self::start_with(n, None, true)
    }

    /// Ports are picked free, then bound by etcd: another test's cluster may take one in
    /// between (seen in CI: "bind: address already in use"); then start again on others.
    fn start_with(n: usize, also: Option<std::net::Ipv4Addr>, tls: bool) -> Result<EtcdCluster> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::try_start(n, also, tls) {
                Err(e) if tries < 4 && format!("{e:#}").contains("address already in use") => {}
                r => return r,
            }
        }
    }

    fn try_start(n: usize, also: Option<std::net::Ipv4Addr>, tls: bool) -> Result<EtcdCluster> {
        let dir = tempfile::Builder::new().prefix("gang-etcd-").tempdir()?;
        if tls {
            write_pki(dir.path())?;
        }
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                metrics: free_port(),
                child: None,
            })
            .collect();
        let mut c = EtcdCluster {
            dir,
            members,
            also,
            tls,
        };
        for i in 0..n {
            c.start_member(i, true)?;
        }
        // A member answers 503 until the cluster has a leader: on a loaded 2-core host
        // (other clusters starting beside it) that took over 30 s once.
        c.wait_healthy(Duration::from_secs(120))?;
        Ok(c)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn start_member(&mut self, i: usize, new: bool) -> Result<()> {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let log = std::fs::File::create(self.log(i))?;
        let (also, tls, pki) = (self.also, self.tls, self.dir.path().to_path_buf());
        let m = &mut self.members[i];
        let scheme = if tls { "https" } else { "http" };
        let mut listen = format!("{scheme}://{}", m.client);
        if let Some(ip) = also {
            listen += &format!(",{scheme}://{ip}:{}", m.client.port());
        }
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &listen])
            .args([
                "--advertise-client-urls",
                &format!("{scheme}://{}", m.client),
            ])
            .args(["--listen-metrics-urls", &format!("http://{}", m.metrics)])
            .args(["--listen-peer-urls", &format!("http://{}", m.peer)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://{}", m.peer),
            ])
            .args(["--initial-cluster", &initial])
            .args([
                "--initial-cluster-state",
                if new { "new" } else { "existing" },
            ])
            .args(["--initial-cluster-token", "gang-test"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if tls {
            cmd.arg("--cert-file")
                .arg(pki.join("server.pem"))
                .arg("--key-file")
                .arg(pki.join("server-key.pem"))
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(pki.join("ca.pem"));
        }
        // Gone with the test, even one killed before its teardown.
        // SAFETY: only prctl, async-signal-safe, between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .spawn()
            .context("cannot run etcd (Debian's etcd-server: scripts/setup-test-deps.sh)")?;
        m.child = Some(child);
        Ok(())
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.members[i].name))
    }

    /// `etcd://` with every member and `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        let hosts: Vec<String> = self.members.iter().map(|m| m.client.to_string()).collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }

    /// `etcd://` with every member as reached from the other side of `also`'s link.
    pub fn url_on(&self, ip: std::net::Ipv4Addr, prefix: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{ip}:{}", m.client.port()))
            .collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }

    /// The client side's files, if the members speak TLS.
    pub fn client_tls(&self) -> Option<ClientTls> {
        let d = self.dir.path();
        self.tls.then(|| ClientTls {
            ca: d.join("ca.pem"),
            cert: d.join("client.pem"),
            key: d.join("client-key.pem"),
        })
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.to_string()).collect()
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT member `i`: it stops answering, its connections open.
    pub fn pause(&self, i: usize, paused: bool) {
        use nix::sys::signal::{Signal, kill};
        if let Some(c) = &self.members[i].child {
            let sig = if paused {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            let _ = kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        }
    }

    /// Start member `i` again on its data.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.start_member(i, false)
    }

    /// Every running member answers its health endpoint.
    pub fn wait_healthy(&mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                continue;
            }
            loop {
                let body = health(self.members[i].metrics).unwrap_or_default();
                if body.contains("\"health\":\"true\"") {
                    break;
                }
                // A member that exited (a port taken before it bound it) will not answer:
                // said at once, not after the whole wait.
                if let Some(st) = self.members[i]
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    bail!(
                        "etcd member {i} exited ({st}); log: {}",
                        std::fs::read_to_string(self.log(i)).unwrap_or_default()
                    );
                }
                if Instant::now() > deadline {
                    bail!(
                        "etcd member {i} not healthy within {within:?}: {body}; log: {}",
                        std::fs::read_to_string(self.log(i)).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

/// A member's /health answer (None while it does not listen).
fn health(addr: SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
