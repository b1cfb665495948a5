//! The agent's side of the messaging library (`gang-msg`): for each rank, a private
//! directory with the control socket, the table page (the agent writes: the clock offset
//! and the rank's next switch-out) and the state page (the rank writes: blocked since,
//! counters, quiesce timings); the control socket's fences, gathered across nodes through
//! the master; and the activity read from state pages for the master's deadlock check.
//!
//! The directory (`msg_dir/X-Y/JOB.RANK`, mode 0700) and the state page belong to the
//! rank's user; the table page stays the agent's (mode 0644: the rank only reads it). The
//! control socket takes only processes of the rank's user (`SO_PEERCRED`). A rank that
//! does not link the library never touches any of it.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gang_msg::abi::{
    CtlReply, CtlRequest, MAX_CTL_FRAME, StatePage, TablePage, env as msg_env, files,
};
use gang_proto::v1::agent_registry_client::AgentRegistryClient;
use gang_proto::v1::{FenceRequest, RankActivity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// How long an exited rank's PMI server may take to read the rest of what it sent.
const PMI_LINGER: Duration = Duration::from_millis(500);

/// The master's registry (the type `registry_client` uses; named here so this module
/// stays below `node` in the import graph).
type RegistryClient = AgentRegistryClient<tonic::transport::Channel>;

use crate::clock::Clock;
use crate::error::Coord;
use crate::ranks::RankKey;
use crate::switch::MsgPages;

/// A rank's files and control-socket task.
struct MsgRank {
    dir: PathBuf,
    table: Arc<TablePage>,
    state: Arc<StatePage>,
    server: JoinHandle<()>,
    /// The last blocked-since read (host monotonic) and what it was reported as (master
    /// clock): the same wait must be reported the same at every check, and converting
    /// it anew each time would move it by the clock's jitter.
    since: Mutex<(u64, i64)>,
}

/// Everything the agent keeps for ranks that may use the library.
pub struct MsgHub {
    base: PathBuf,
    node: Coord,
    host_id: String,
    clock: Arc<Clock>,
    /// The master, for fences (set once the agent has its channel).
    master: OnceLock<RegistryClient>,
    ranks: Mutex<HashMap<RankKey, MsgRank>>,
    /// The ranks' PMI servers (`pmi::serve`); each ends with the abort message, if any.
    pmi: Mutex<HashMap<RankKey, JoinHandle<Option<crate::pmi::Abort>>>>,
    /// The node's PMIx server, started at the first `--mpi pmix` launch (or why not).
    pmix: OnceLock<Result<Arc<crate::pmix::PmixNode<MsgHub>>, String>>,
    /// Each rank's copy of its job's space, as of the fence it names: the master then
    /// answers a fence with only what changed since.
    spaces: Mutex<HashMap<RankKey, HeldSpace>>,
}

/// A rank's copy of its job's key-value space, and the fence it is as of.
type HeldSpace = (u32, BTreeMap<String, String>);

impl std::fmt::Debug for MsgHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgHub").field("base", &self.base).finish()
    }
}

/// What a new rank needs to know to set up the library.
pub struct MsgLaunch {
    pub key: RankKey,
    pub uid: Option<(u32, u32)>,
    /// "x0,y0,w,h".
    pub part: String,
    pub context: &'static str,
}

/// The default base directory: `/run/gang/msg` for root, else one per user in shared
/// memory. Both are tmpfs on a usual Linux: the pages are shared mappings, which a disk
/// file system would write back, and creating a rank's files on ext4 costs inode
/// allocation on the launch path (seen as ~25% of a 4x4 launch with /tmp on ext4).
pub fn default_base(agent_uid: u32) -> PathBuf {
    if agent_uid == 0 {
        PathBuf::from("/run/gang/msg")
    } else {
        memory_dir().join(format!("gang-msg-{agent_uid}"))
    }
}

/// `/dev/shm` where there is one, else TMPDIR.
pub fn memory_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// This host's id: equal ids mean ranks can use Unix sockets between them.
fn host_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "localhost".into())
}

impl MsgHub {
    pub fn new(base: PathBuf, node: Coord, clock: Arc<Clock>) -> Arc<MsgHub> {
        Arc::new(MsgHub {
            base,
            node,
            host_id: host_id(),
            clock,
            master: OnceLock::new(),
            ranks: Mutex::new(HashMap::new()),
            pmi: Mutex::new(HashMap::new()),
            pmix: OnceLock::new(),
            spaces: Mutex::new(HashMap::new()),
        })
    }

    pub fn base(&self) -> &std::path::Path {
        &self.base
    }

    /// The master's registry, once connected.
    pub fn set_master(&self, client: RegistryClient) {
        let _ = self.master.set(client);
    }

    fn node_dir(&self) -> PathBuf {
        self.base.join(format!("{}-{}", self.node.x, self.node.y))
    }

    /// Make the rank's directory, pages and control socket; the environment to add.
    /// Must run inside the runtime (the control socket is served by a task).
    pub fn prepare(self: &Arc<Self>, l: &MsgLaunch) -> std::io::Result<Vec<(String, String)>> {
        let node_dir = self.node_dir();
        if !node_dir.is_dir() {
            // Traversable by every user (a umask such as systemd's 0077 would not make
            // it so), listable by none: each rank knows its own path.
            for d in [&self.base, &node_dir] {
                if !d.is_dir() {
                    std::fs::create_dir_all(d)?;
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
                }
            }
        }
        let dir = node_dir.join(format!("{}.{}", l.key.job_id, l.key.rank));
        // A leftover of an earlier agent (the same job and rank cannot run twice here).
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let table = TablePage::create(&dir.join(files::TABLE_PAGE))?;
        std::fs::set_permissions(
            dir.join(files::TABLE_PAGE),
            std::fs::Permissions::from_mode(0o644),
        )?;
        table.write_offset(self.clock.offset_ns());
        let state_path = dir.join(files::STATE_PAGE);
        let state = StatePage::create(&state_path)?;
        std::fs::set_permissions(&state_path, std::fs::Permissions::from_mode(0o600))?;
        let ctl_path = dir.join(files::CTL_SOCK);
        let listener = UnixListener::bind(&ctl_path)?;
        if let Some((uid, gid)) = l.uid {
            for p in [&dir, &state_path, &ctl_path] {
                chown(p, Some(uid), Some(gid))?;
            }
        }
        let server = tokio::spawn(serve(
            Arc::clone(self),
            listener,
            l.key,
            l.uid.map(|(u, _)| u),
        ));
        let env = vec![
            (msg_env::PART.to_string(), l.part.clone()),
            (msg_env::MSG_DIR.to_string(), dir.display().to_string()),
            (msg_env::HOST_ID.to_string(), self.host_id.clone()),
            (msg_env::MSG_CONTEXT.to_string(), l.context.to_string()),
        ];
        self.ranks.lock().unwrap().insert(
            l.key,
            MsgRank {
                dir,
                table: Arc::new(table),
                state: Arc::new(state),
                server,
                since: Mutex::new((0, 0)),
            },
        );
        Ok(env)
    }

    /// Serve the rank's PMI socket (the agent's end of its socketpair).
    pub fn start_pmi(
        self: &Arc<Self>,
        stream: UnixStream,
        job: crate::pmi::PmiJob,
        pgid: nix::unistd::Pid,
    ) {
        let key = job.key;
        let task = tokio::spawn(crate::pmi::serve(Arc::clone(self), stream, job, pgid));
        if let Some(old) = self.pmi.lock().unwrap().insert(key, task) {
            old.abort();
        }
    }

    /// Register a PMIx rank with the node's PMIx server (started now if it is not yet);
    /// the variables for its environment. Must run inside the runtime.
    pub fn pmix_prepare(
        self: &Arc<Self>,
        l: &crate::pmix::PmixLaunch,
    ) -> Result<Vec<(String, String)>, String> {
        let server = self.pmix.get_or_init(|| {
            crate::pmix::PmixNode::start(self, self.node_dir().join("pmix"), self.node)
                .map(Arc::new)
        });
        server.as_ref().map_err(Clone::clone)?.prepare(l)
    }

    /// The PMIx rank runs as the group `pgid`.
    pub fn pmix_started(&self, key: RankKey, pgid: nix::unistd::Pid) {
        if let Some(Ok(p)) = self.pmix.get() {
            p.started(key, pgid);
        }
    }

    /// The rank exited: its PMI server's end (it sees the socket close, unless a process
    /// the rank left behind holds it, or it waits in a fence), and the abort message the
    /// rank sent, if it did.
    pub async fn pmi_finished(&self, key: RankKey) -> Option<crate::pmi::Abort> {
        // A PMIx abort is recorded before the rank is killed.
        if let Some(abort) = self
            .pmix
            .get()
            .and_then(|p| p.as_ref().ok()?.take_abort(key))
        {
            if let Some(t) = self.pmi.lock().unwrap().remove(&key) {
                t.abort();
            }
            return Some(abort);
        }
        let mut task = self.pmi.lock().unwrap().remove(&key)?;
        match tokio::time::timeout(PMI_LINGER, &mut task).await {
            Ok(Ok(abort)) => abort,
            Ok(Err(_)) => None,
            Err(_) => {
                task.abort();
                None
            }
        }
    }

    /// The rank is gone: its files and task too.
    pub fn remove(&self, key: RankKey) {
        if let Some(t) = self.pmi.lock().unwrap().remove(&key) {
            t.abort();
        }
        if let Some(Ok(p)) = self.pmix.get() {
            p.remove(key);
        }
        self.spaces.lock().unwrap().remove(&key);
        if let Some(r) = self.ranks.lock().unwrap().remove(&key) {
            r.server.abort();
            let _ = std::fs::remove_dir_all(&r.dir);
        }
    }

    /// A rank's pages, for the switch thread.
    pub fn pages(&self, key: RankKey) -> Option<MsgPages> {
        self.ranks.lock().unwrap().get(&key).map(|r| MsgPages {
            table: Arc::clone(&r.table),
            state: Arc::clone(&r.state),
        })
    }

    /// What every rank that started the library is doing, for the heartbeat. Blocked-since
    /// times go on the master clock.
    pub fn activity(&self) -> Vec<RankActivity> {
        let mono_now = monotonic_ns();
        let master_now = self.clock.master_now_ns();
        let ranks = self.ranks.lock().unwrap();
        let offset = self.clock.offset_ns();
        for r in ranks.values() {
            // Keep the rank's view of the master clock current.
            r.table.write_offset(offset);
        }
        ranks
            .iter()
            .filter_map(|(key, r)| {
                let s = r.state.snapshot();
                if !s.ready {
                    return None;
                }
                let mut since = r.since.lock().unwrap();
                if since.0 != s.blocked_since_ns {
                    // Monotonic on this host, to the master clock.
                    let converted = if s.blocked_since_ns == 0 {
                        0
                    } else {
                        master_now - (mono_now - s.blocked_since_ns as i64)
                    };
                    *since = (s.blocked_since_ns, converted);
                }
                Some(RankActivity {
                    job_id: key.job_id,
                    rank: key.rank,
                    blocked_since_ns: since.1,
                    source: s.wait_src,
                    tag: s.wait_tag,
                    posted: s.posted_sends,
                    delivered: s.delivered,
                })
            })
            .collect()
    }

    /// A rank's fence, through the master: retried while the master is away.
    async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut delay = Duration::from_millis(20);
        // Set when a delta could not be merged: ask for the whole space.
        let mut whole = false;
        loop {
            let Some(client) = self.master.get() else {
                tokio::time::sleep(delay).await;
                continue;
            };
            // The space as of the rank's last fence, if this agent holds it (an earlier
            // epoch: a fence ahead of it would be a retry of this one).
            let known = self
                .spaces
                .lock()
                .unwrap()
                .get(&key)
                .map(|(e, _)| *e)
                .filter(|&e| e < epoch && !whole)
                .unwrap_or(0);
            let req = FenceRequest {
                x: self.node.x,
                y: self.node.y,
                job_id: key.job_id,
                rank: key.rank,
                epoch,
                puts: puts.clone().into_iter().collect(),
                known_epoch: known,
            };
            match client.clone().fence(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let mut spaces = self.spaces.lock().unwrap();
                    let held = spaces.entry(key).or_default();
                    if r.delta && held.0 != known {
                        // Not the space the delta is against (never expected: a rank's
                        // fences come one at a time).
                        whole = true;
                        continue;
                    }
                    if !r.delta {
                        held.1.clear();
                    }
                    held.1.extend(r.kvs);
                    held.0 = epoch;
                    return Ok(held.1.clone());
                }
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(s) => return Err(s.message().to_string()),
            }
        }
    }
}

impl crate::pmi::Fencer for MsgHub {
    async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, String> {
        MsgHub::fence(self, key, epoch, &puts).await
    }
}

/// Serve a rank's control socket: Hello, Put, Fence, Abort, from its own user only.
async fn serve(hub: Arc<MsgHub>, listener: UnixListener, key: RankKey, uid: Option<u32>) {
    // Everything the rank put, sent whole with each fence (a restarted master rebuilds
    // the job's space from them).
    let mut puts = BTreeMap::new();
    let mut epoch = 0u32;
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let peer = conn.peer_cred().ok().map(|c| c.uid());
        let allowed = match (uid, peer) {
            (_, Some(0)) => true,
            (Some(want), Some(got)) => want == got,
            (None, Some(got)) => got == nix::unistd::geteuid().as_raw(),
            (_, None) => false,
        };
        if !allowed {
            warn!(
                job_id = key.job_id,
                rank = key.rank,
                ?peer,
                "control socket: a process of another user was refused"
            );
            continue;
        }
        loop {
            let req: CtlRequest = match read(&mut conn).await {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    warn!(job_id = key.job_id, rank = key.rank, error = %e, "control socket: bad frame");
                    break;
                }
            };
            match req {
                CtlRequest::Hello { pid, rank } => {
                    info!(
                        job_id = key.job_id,
                        rank = key.rank,
                        pid,
                        said_rank = rank,
                        "messaging library started"
                    );
                }
                CtlRequest::Put { key: k, value } => {
                    puts.insert(k, value);
                }
                CtlRequest::Fence => {
                    epoch += 1;
                    let reply = match hub.fence(key, epoch, &puts).await {
                        Ok(kvs) => CtlReply::FenceDone { kvs },
                        Err(message) => CtlReply::Error { message },
                    };
                    if write(&mut conn, &reply).await.is_err() {
                        break;
                    }
                }
                CtlRequest::Abort { code, message } => {
                    warn!(job_id = key.job_id, rank = key.rank, code, %message, "the rank aborted");
                }
            }
        }
    }
}

async fn read(conn: &mut UnixStream) -> std::io::Result<Option<CtlRequest>> {
    let mut len = [0u8; 4];
    match conn.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_CTL_FRAME {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    conn.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(std::io::Error::other)
}

async fn write(conn: &mut UnixStream, reply: &CtlReply) -> std::io::Result<()> {
    let body = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    let mut buf = (body.len() as u32).to_le_bytes().to_vec();
    buf.extend_from_slice(&body);
    conn.write_all(&buf).await
}

impl Drop for MsgHub {
    fn drop(&mut self) {
        // The node's directory, once its ranks' are gone (never anything else of `base`),
        // and the PMIx server's files in it.
        if self.pmix.get().is_some() {
            let _ = std::fs::remove_dir_all(self.node_dir().join("pmix"));
        }
        let _ = std::fs::remove_dir(self.node_dir());
        let _ = std::fs::remove_dir(&self.base);
    }
}

/// CLOCK_MONOTONIC in ns: the clock of the state page's `blocked_since_ns`.
fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
