//! Test support: a real AgentRegistry server on loopback that records what agents send it
//! (it stands in for the master, whose crate is built separately), serving the agent port
//! as the master does (mutual TLS with certificates from `Pki::init`, checking that a node
//! speaks for itself only), a NodeAgent client with the master's certificate, and helpers
//! that wait on conditions with deadlines instead of sleeping.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gang_agent::AgentConfig;
use gang_auth::PeerName;
use gang_auth::names::node_dns;
use gang_auth::peer::peer_name;
use gang_auth::pki::{Pki, TlsFiles};

use gang_proto::v1::agent_registry_server::{AgentRegistry, AgentRegistryServer};
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{
    ClockProbeRequest, ClockProbeResponse, FenceDoneAck, FenceDoneRequest, FenceRequest,
    FenceResponse, GangMode, HeartbeatRequest, HeartbeatResponse, LaunchRequest, OutputAck,
    OutputBatch, RankExit, RankExitAck, RegisterRequest, RegisterResponse, Stream, SwitchReport,
    SwitchReportAck,
};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Request, Response, Status};

/// Generous: conditions normally hold within milliseconds; this only bounds a failure.
pub const DEADLINE: Duration = Duration::from_secs(10);
pub const HEARTBEAT_MS: u32 = 50;
/// Long enough that no test's lease runs out unless it means to.
pub const NODE_TIMEOUT_MS: u32 = 60_000;

/// A cluster's certificates in a temporary directory: a CA, the master, the nodes of a
/// 5x4 mesh (every coordinate the tests use).
pub struct TestPki {
    pki: Pki,
    _dir: tempfile::TempDir,
}

impl TestPki {
    pub fn new() -> Arc<TestPki> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let pki = Pki::init(dir.path().join("tls"), 5, 4, 1).expect("cluster certificates");
        Arc::new(TestPki { pki, _dir: dir })
    }

    pub fn files(&self, who: &PeerName) -> TlsFiles {
        self.pki.files(who)
    }

    pub fn node(&self, x: u32, y: u32) -> TlsFiles {
        self.files(&PeerName::Node { x, y })
    }

    /// A certificate for `who` signed by this CA (e.g. a user's).
    pub fn issue(&self, who: &PeerName) -> TlsFiles {
        self.pki.issue(who, 1).expect("issue a certificate")
    }

    /// An agent's config for node (x, y) with its certificate, against `registry`. Tests
    /// run as root and start their ranks as root: allowed here, refused by default.
    pub fn agent_config(&self, registry: &TestRegistry, x: u32, y: u32) -> AgentConfig {
        let mut cfg = AgentConfig::for_test(&registry.url(), x, y, self.node(x, y));
        cfg.allow_root = true;
        cfg
    }

    /// A NodeAgent client of the agent of node (x, y) at `addr`, with `who`'s certificate
    /// as its identity (None: no client certificate), verifying the agent as the master
    /// does.
    pub async fn client_as(
        &self,
        who: Option<&PeerName>,
        addr: SocketAddr,
        x: u32,
        y: u32,
    ) -> Result<NodeAgentClient<Channel>, tonic::transport::Error> {
        let ca = self.files(&PeerName::Master).read().expect("CA").ca;
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .domain_name(node_dns(x, y));
        if let Some(who) = who {
            let pem = self.files(who).read().expect("client certificate");
            tls = tls.identity(Identity::from_pem(pem.cert, pem.key));
        }
        let channel = Endpoint::from_shared(format!("https://{addr}"))?
            .tls_config(tls)?
            .connect()
            .await?;
        Ok(NodeAgentClient::new(channel))
    }

    /// The master's client of the agent of node (x, y).
    pub async fn master_client(
        &self,
        addr: SocketAddr,
        x: u32,
        y: u32,
    ) -> NodeAgentClient<Channel> {
        self.client_as(Some(&PeerName::Master), addr, x, y)
            .await
            .expect("connect to the agent")
    }
}

/// How the fake master behaves.
#[derive(Debug, Clone)]
pub struct MasterOptions {
    /// Jobs to hand back as `kill_jobs` on registration.
    pub kill_jobs: Vec<u64>,
    /// This "master" clock runs this far ahead of the host's (for clock probes).
    pub clock_ahead_ns: i64,
    pub node_timeout_ms: u32,
    /// The lease it states (0: none, as a master before leases: the node timeout and a
    /// heartbeat period hold).
    pub agent_lease_ms: u32,
    /// Whose certificate it serves with (the master's, unless a test impersonates).
    pub identity: PeerName,
}

impl Default for MasterOptions {
    fn default() -> Self {
        MasterOptions {
            kill_jobs: Vec::new(),
            clock_ahead_ns: 0,
            node_timeout_ms: NODE_TIMEOUT_MS,
            agent_lease_ms: 0,
            identity: PeerName::Master,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Event {
    Register(RegisterRequest),
    Heartbeat(HeartbeatRequest),
    Output(OutputBatch),
    Exit(RankExit),
    Switches(SwitchReport),
}

#[derive(Debug)]
struct Shared {
    events: Mutex<Vec<Event>>,
    version: watch::Sender<u64>,
    /// Nodes that registered with this server instance (a fresh server knows none, like
    /// a restarted master).
    known: Mutex<Vec<(u32, u32)>>,
    options: MasterOptions,
    /// When each clock probe was answered.
    probes_at: Mutex<Vec<Instant>>,
    /// When each heartbeat was received.
    heartbeats_at: Mutex<Vec<Instant>>,
    /// While true, Register and Heartbeat calls are held unanswered (a hung master).
    silent: watch::Sender<bool>,
}

impl Shared {
    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
        self.version.send_modify(|v| *v += 1);
    }

    /// Hold the call while the master is silent.
    async fn answer_when_not_silent(&self) {
        let mut silent = self.silent.subscribe();
        let _ = silent.wait_for(|s| !*s).await;
    }
}

/// Like the master: an agent speaks for the node in its certificate only.
fn check_node<T>(request: &Request<T>, x: u32, y: u32) -> Result<(), Status> {
    let named = request
        .peer_certs()
        .and_then(|c| c.first().and_then(|leaf| peer_name(leaf.as_ref())));
    match named {
        Some(PeerName::Node { x: cx, y: cy }) if (cx, cy) == (x, y) => Ok(()),
        other => Err(Status::permission_denied(format!(
            "the certificate names {other:?}, not node ({x},{y})"
        ))),
    }
}

#[derive(Debug, Clone)]
struct Recorder(Arc<Shared>);

#[tonic::async_trait]
impl AgentRegistry for Recorder {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        self.0.answer_when_not_silent().await;
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        let req = request.into_inner();
        self.0.known.lock().unwrap().push((req.x, req.y));
        self.0.record(Event::Register(req));
        Ok(Response::new(RegisterResponse {
            mesh_w: 5,
            mesh_h: 4,
            heartbeat_ms: HEARTBEAT_MS,
            kill_jobs: self.0.options.kill_jobs.clone(),
            node_timeout_ms: self.0.options.node_timeout_ms,
            agent_lease_ms: self.0.options.agent_lease_ms,
            // Heartbeats every period, idle or not (as a master before quiet liveness).
            ..RegisterResponse::default()
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        self.0.answer_when_not_silent().await;
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        self.0.heartbeats_at.lock().unwrap().push(Instant::now());
        let req = request.into_inner();
        let known = self.0.known.lock().unwrap().contains(&(req.x, req.y));
        self.0.record(Event::Heartbeat(req));
        Ok(Response::new(HeartbeatResponse {
            known,
            ..Default::default()
        }))
    }

    async fn report_exit(
        &self,
        request: Request<RankExit>,
    ) -> Result<Response<RankExitAck>, Status> {
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        self.0.record(Event::Exit(request.into_inner()));
        Ok(Response::new(RankExitAck {}))
    }

    async fn push_output(
        &self,
        request: Request<OutputBatch>,
    ) -> Result<Response<OutputAck>, Status> {
        self.0.record(Event::Output(request.into_inner()));
        Ok(Response::new(OutputAck {}))
    }

    async fn report_switches(
        &self,
        request: Request<SwitchReport>,
    ) -> Result<Response<SwitchReportAck>, Status> {
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        self.0.record(Event::Switches(request.into_inner()));
        Ok(Response::new(SwitchReportAck {}))
    }

    async fn clock_probe(
        &self,
        request: Request<ClockProbeRequest>,
    ) -> Result<Response<ClockProbeResponse>, Status> {
        let t2_ns = gang_agent::rt::clock::realtime_ns() + self.0.options.clock_ahead_ns;
        self.0.probes_at.lock().unwrap().push(Instant::now());
        Ok(Response::new(ClockProbeResponse {
            t1_ns: request.into_inner().t1_ns,
            t2_ns,
            t3_ns: gang_agent::rt::clock::realtime_ns() + self.0.options.clock_ahead_ns,
        }))
    }

    /// As a master would for a job whose only rank is the caller: the fence is complete
    /// at once, with what it put.
    async fn fence(
        &self,
        request: Request<FenceRequest>,
    ) -> Result<Response<FenceResponse>, Status> {
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        Ok(Response::new(FenceResponse {
            kvs: request.into_inner().puts,
            delta: false,
            pending: false,
        }))
    }

    async fn fence_done(
        &self,
        request: Request<FenceDoneRequest>,
    ) -> Result<Response<FenceDoneAck>, Status> {
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        Ok(Response::new(FenceDoneAck {}))
    }

    /// Each gathered exit recorded as if reported alone.
    async fn report_exits(
        &self,
        request: Request<gang_proto::v1::RankExits>,
    ) -> Result<Response<gang_proto::v1::RankExitsAck>, Status> {
        check_node(&request, request.get_ref().x, request.get_ref().y)?;
        for e in request.into_inner().exits {
            self.0.record(Event::Exit(e));
        }
        Ok(Response::new(gang_proto::v1::RankExitsAck {}))
    }

    async fn heartbeat_batch(
        &self,
        _request: Request<gang_proto::v1::HeartbeatBatchRequest>,
    ) -> Result<Response<gang_proto::v1::HeartbeatBatchResponse>, Status> {
        // This registry names no liveness heads: no agent sends it a batch.
        Err(Status::unimplemented("no liveness tree here"))
    }
}

/// A recording AgentRegistry server.
pub struct TestRegistry {
    pub addr: SocketAddr,
    /// The cluster's certificates (a restarted "master" keeps them).
    pub pki: Arc<TestPki>,
    shared: Arc<Shared>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl TestRegistry {
    /// A new cluster (new certificates) and its master.
    pub async fn start() -> Self {
        Self::start_with(MasterOptions::default()).await
    }

    pub async fn start_with(options: MasterOptions) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), TestPki::new(), options).await
    }

    /// Start on a given address with the given certificates (to restart "the master"
    /// where agents expect it).
    pub async fn start_on(addr: SocketAddr, pki: Arc<TestPki>, options: MasterOptions) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind test registry");
        let addr = listener.local_addr().unwrap();
        let pem = pki
            .files(&options.identity)
            .read()
            .expect("master certificate");
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(pem.cert, pem.key))
            .client_ca_root(Certificate::from_pem(pem.ca));
        let shared = Arc::new(Shared {
            events: Mutex::default(),
            version: watch::Sender::new(0),
            known: Mutex::default(),
            options,
            probes_at: Default::default(),
            heartbeats_at: Mutex::default(),
            silent: watch::Sender::new(false),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::builder()
            .tls_config(tls)
            .expect("test registry TLS")
            .add_service(AgentRegistryServer::new(Recorder(Arc::clone(&shared))))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            });
        let task = tokio::spawn(async move {
            server.await.expect("test registry serves");
        });
        TestRegistry {
            addr,
            pki,
            shared,
            stop,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Stop serving and close the connections (like a master going down). Returns the
    /// certificates, for a restart.
    pub async fn stop(self) -> Arc<TestPki> {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(DEADLINE, &mut task).await.is_err() {
            task.abort();
            panic!("test registry did not stop");
        }
        self.pki
    }

    /// Hold Register and Heartbeat calls unanswered (true) or answer them again (false),
    /// as a hung master would; the other calls are answered.
    pub fn set_silent(&self, silent: bool) {
        self.shared.silent.send_replace(silent);
    }

    /// When the last heartbeat was received.
    pub fn last_heartbeat_at(&self) -> Option<Instant> {
        self.heartbeat_log().last()
    }

    /// The heartbeat receipts, readable after the server stopped.
    pub fn heartbeat_log(&self) -> HeartbeatLog {
        HeartbeatLog(Arc::clone(&self.shared))
    }

    /// Answer `known = false` from now on, as a master that lost its memory would.
    pub fn forget_nodes(&self) {
        self.shared.known.lock().unwrap().clear();
    }

    /// When each clock probe answered so far came.
    pub fn probes_at(&self) -> Vec<Instant> {
        self.shared.probes_at.lock().unwrap().clone()
    }

    pub fn events(&self) -> Vec<Event> {
        self.shared.events.lock().unwrap().clone()
    }

    /// Wait until `check` finds what it looks for in the events so far.
    pub async fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&[Event]) -> Option<T>) -> T {
        let mut version = self.shared.version.subscribe();
        let deadline = Instant::now() + DEADLINE;
        loop {
            version.borrow_and_update();
            if let Some(found) = check(&self.shared.events.lock().unwrap()) {
                return found;
            }
            if tokio::time::timeout_at(deadline, version.changed())
                .await
                .is_err()
            {
                panic!("timed out waiting for {what}; events: {:#?}", self.events());
            }
        }
    }

    /// The exit report of a rank, once it arrives, and its position among the events.
    pub async fn exit_of(&self, job_id: u64, rank: u32) -> (usize, How) {
        self.wait_for(&format!("exit of job {job_id} rank {rank}"), |events| {
            events.iter().enumerate().find_map(|(i, e)| match e {
                Event::Exit(x) if x.job_id == job_id && x.rank == rank => {
                    Some((i, x.how.clone().expect("exit has a how")))
                }
                _ => None,
            })
        })
        .await
    }

    pub async fn wait_output(
        &self,
        job_id: u64,
        rank: u32,
        stream: Stream,
        needle: &str,
    ) -> String {
        self.wait_for(
            &format!("{needle:?} on {stream:?} of job {job_id}"),
            |events| {
                let out = output_of(events, job_id, rank, stream);
                out.contains(needle).then_some(out)
            },
        )
        .await
    }

    pub async fn wait_register(&self, nth: usize) -> RegisterRequest {
        self.wait_for(&format!("register #{nth}"), |events| {
            events
                .iter()
                .filter_map(|e| match e {
                    Event::Register(r) => Some(r.clone()),
                    _ => None,
                })
                .nth(nth - 1)
        })
        .await
    }
}

/// When a test registry received heartbeats.
pub struct HeartbeatLog(Arc<Shared>);

impl HeartbeatLog {
    pub fn last(&self) -> Option<Instant> {
        self.0.heartbeats_at.lock().unwrap().last().copied()
    }
}

/// Everything a rank wrote on one stream, in the events given.
pub fn output_of(events: &[Event], job_id: u64, rank: u32, stream: Stream) -> String {
    let mut out = Vec::new();
    for e in events {
        if let Event::Output(b) = e {
            if b.job_id != job_id {
                continue;
            }
            for c in &b.chunks {
                if c.rank == rank && c.stream == stream as i32 {
                    out.extend_from_slice(&c.data);
                }
            }
        }
    }
    String::from_utf8(out).expect("utf-8 output")
}

/// A launch of `argv` in `cwd`, with the test's PATH.
pub fn launch_req(job_id: u64, rank: u32, argv: &[&str], cwd: &str) -> LaunchRequest {
    let mut env = HashMap::new();
    env.insert(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    );
    LaunchRequest {
        job_id,
        rank,
        size: 4,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: cwd.to_owned(),
        env,
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        stdin: false,
        gang: GangMode::Unspecified as i32,
        groups: Vec::new(),
        user: String::new(),
        part: None,
        msg_context: 0,
        mpi: 0,
        mpi_check: false,
        output: String::new(),
        error: String::new(),
        namespace: String::new(),
        fence_width: 0,
        fence_parent: String::new(),
        allocation: 0,
        script: String::new(),
        script_at: 0,
        pty: 0,
    }
}

/// Time a process has spent on a CPU, ns (/proc/PID/schedstat; exact whenever it is not
/// on a CPU at the moment).
pub fn proc_run_ns(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The nice value of a process (field 19 of /proc/PID/stat), or None if it is gone.
pub fn proc_nice(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command: state is field 3, nice field 19.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(16)?.parse().ok()
}

/// The state letter of a process (R, S, T, Z, ...), or None if it no longer exists.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Dead: gone, or a zombie waiting for someone else (init) to reap it.
pub fn is_dead(pid: u32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// Poll a condition the kernel owns (process states have no notification) until it holds.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
