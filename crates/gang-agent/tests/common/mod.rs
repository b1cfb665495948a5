//! Test support: a real AgentRegistry server on loopback that records what agents send it
//! (it stands in for the master, whose crate is built separately), and helpers that wait
//! on conditions with deadlines instead of sleeping.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gang_proto::v1::agent_registry_server::{AgentRegistry, AgentRegistryServer};
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{
    ClockProbeRequest, ClockProbeResponse, GangMode, HeartbeatRequest, HeartbeatResponse,
    LaunchRequest, OutputAck, OutputBatch, RankExit, RankExitAck, RegisterRequest,
    RegisterResponse, Stream, SwitchReport, SwitchReportAck,
};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// Generous: conditions normally hold within milliseconds; this only bounds a failure.
pub const DEADLINE: Duration = Duration::from_secs(10);
pub const HEARTBEAT_MS: u32 = 50;

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
    kill_jobs: Mutex<Vec<u64>>,
    /// This "master" clock runs this far ahead of the host's (for clock probes).
    clock_ahead_ns: i64,
    probes: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
        self.version.send_modify(|v| *v += 1);
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
        let req = request.into_inner();
        self.0.known.lock().unwrap().push((req.x, req.y));
        self.0.record(Event::Register(req));
        Ok(Response::new(RegisterResponse {
            mesh_w: 4,
            mesh_h: 4,
            heartbeat_ms: HEARTBEAT_MS,
            kill_jobs: self.0.kill_jobs.lock().unwrap().clone(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let req = request.into_inner();
        let known = self.0.known.lock().unwrap().contains(&(req.x, req.y));
        self.0.record(Event::Heartbeat(req));
        Ok(Response::new(HeartbeatResponse { known }))
    }

    async fn report_exit(
        &self,
        request: Request<RankExit>,
    ) -> Result<Response<RankExitAck>, Status> {
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
        self.0.record(Event::Switches(request.into_inner()));
        Ok(Response::new(SwitchReportAck {}))
    }

    async fn clock_probe(
        &self,
        request: Request<ClockProbeRequest>,
    ) -> Result<Response<ClockProbeResponse>, Status> {
        let t2_ns = gang_agent::clock::realtime_ns() + self.0.clock_ahead_ns;
        self.0
            .probes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Response::new(ClockProbeResponse {
            t1_ns: request.into_inner().t1_ns,
            t2_ns,
            t3_ns: gang_agent::clock::realtime_ns() + self.0.clock_ahead_ns,
        }))
    }
}

/// A recording AgentRegistry server.
pub struct TestRegistry {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl TestRegistry {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), Vec::new()).await
    }

    /// Start on a given address (to restart "the master" where agents expect it), with
    /// jobs to hand back as `kill_jobs` on registration.
    pub async fn start_on(addr: SocketAddr, kill_jobs: Vec<u64>) -> Self {
        Self::start_with(addr, kill_jobs, 0).await
    }

    /// Like `start_on`, with a master clock `clock_ahead_ns` ahead of the host's.
    pub async fn start_with(addr: SocketAddr, kill_jobs: Vec<u64>, clock_ahead_ns: i64) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind test registry");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            events: Mutex::default(),
            version: watch::Sender::new(0),
            known: Mutex::default(),
            kill_jobs: Mutex::new(kill_jobs),
            clock_ahead_ns,
            probes: Default::default(),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .add_service(AgentRegistryServer::new(Recorder(Arc::clone(&shared))))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            });
        let task = tokio::spawn(async move {
            server.await.expect("test registry serves");
        });
        TestRegistry {
            addr,
            shared,
            stop,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop serving and close the connections (like a master going down).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(DEADLINE, &mut task).await.is_err() {
            task.abort();
            panic!("test registry did not stop");
        }
    }

    /// Answer `known = false` from now on, as a master that lost its memory would.
    pub fn forget_nodes(&self) {
        self.shared.known.lock().unwrap().clear();
    }

    /// Clock probes answered so far.
    pub fn probes(&self) -> u64 {
        self.shared
            .probes
            .load(std::sync::atomic::Ordering::Relaxed)
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

pub async fn agent_client(addr: SocketAddr) -> NodeAgentClient<Channel> {
    NodeAgentClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the agent")
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
