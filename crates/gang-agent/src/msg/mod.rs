//! The agent's side of the messaging library (`gang-msg`) and of the MPI servers, split
//! by job:
//! - `pages`: each rank's private directory with its table page (the agent writes: the
//!   clock offset and the rank's next switch-out) and state page (the rank writes:
//!   blocked since, counters, quiesce timings), and the activity read from state pages
//!   for the master's deadlock check;
//! - `control`: each rank's control socket (Hello, Put, Fence, Abort);
//! - `space`: the jobs' key-value spaces, gathered across nodes by fences through the
//!   master;
//! - `mpi`: each rank's PMI server and the node's PMIx server, which fence through the
//!   same spaces.
//!
//! `MsgHub` owns one of each and only passes a rank's key between them. A rank that does
//! not link the library never touches any of it.

pub(crate) mod control;
mod fence_link;
pub mod fence_tree;
mod mpi;
mod pages;
pub use pages::SCRIPT;
mod space;

use std::collections::BTreeMap;
use std::sync::Arc;

use gang_msg::abi::env as msg_env;
use gang_proto::v1::RankActivity;
use nix::unistd::Pid;
use tokio::net::UnixStream;

pub use pages::{default_base, memory_dir};
pub use space::RegistryClient;

use crate::error::Coord;
use crate::mpi::pmi::{Abort, PmiJob};
use crate::mpi::pmix::PmixLaunch;
use crate::ranks::RankKey;
use crate::rt::clock::Clock;
use crate::switch::MsgPages;
use control::Controls;
use mpi::MpiServers;
use pages::Pages;
use space::Spaces;

/// What a new rank needs to know to set up the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgLaunch {
    pub key: RankKey,
    /// The rank's user and group (None: the agent's).
    pub uid: Option<(u32, u32)>,
    /// "x0,y0,w,h".
    pub part: String,
    pub context: &'static str,
    /// A batch script to write into the rank's directory (`pages::SCRIPT`).
    pub script: Option<String>,
}

/// Everything the agent keeps for ranks that may use the library or MPI.
pub struct MsgHub {
    host_id: String,
    pages: Pages,
    controls: Controls,
    spaces: Arc<Spaces>,
    mpi: MpiServers,
}

impl std::fmt::Debug for MsgHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgHub")
            .field("base", &self.pages.base())
            .finish()
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
    pub fn new(base: std::path::PathBuf, node: Coord, clock: Arc<Clock>) -> Arc<MsgHub> {
        let pages = Pages::new(base, node, clock);
        let pmix_dir = pages.node_dir().join("pmix");
        Arc::new(MsgHub {
            host_id: host_id(),
            pages,
            controls: Controls::default(),
            spaces: Arc::new(Spaces::new(node)),
            mpi: MpiServers::new(node, pmix_dir),
        })
    }

    pub fn base(&self) -> &std::path::Path {
        self.pages.base()
    }

    /// The master's registry, once connected: fences go there.
    pub fn set_master(&self, client: RegistryClient) {
        self.spaces.set_master(client);
    }

    /// The channels to other agents: fences among a job's agents go there.
    pub fn set_peers(&self, peers: Arc<crate::peers::PeerPool>) {
        self.spaces.set_peers(peers);
    }

    /// Where this agent listens, as its peers reach it (PMIx direct modex).
    pub fn set_address(&self, address: String) {
        self.spaces.set_address(address);
    }

    /// A peer's PMIx direct modex, from node `from`.
    pub async fn pmix_modex(
        &self,
        from: Coord,
        req: &gang_proto::v1::ModexRequest,
    ) -> Result<Vec<u8>, tonic::Status> {
        self.mpi.pmix_modex(from, req).await
    }

    /// The rank `key` fences among its job's agents, in `tree`.
    pub fn join_fence_tree(&self, key: RankKey, tree: fence_tree::Tree) {
        self.spaces.join_tree(key, tree);
    }

    /// The rank never started: it leaves its tree.
    pub fn remove_fence_tree(&self, key: RankKey) {
        self.spaces.forget(key);
    }

    /// A fence of rank `key` (an emulated rank's played fences: the same path a PMI,
    /// PMIx or messaging-library fence takes).
    pub async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: &BTreeMap<String, String>,
    ) -> Result<Arc<BTreeMap<String, String>>, String> {
        self.spaces.fence(key, epoch, puts).await
    }

    /// A child's part of a fence among the agents, from node `from` (with `known` not 0,
    /// only what changed since that fence).
    pub async fn fence_up(
        &self,
        job: u64,
        epoch: u32,
        rank: u32,
        from: Coord,
        puts: fence_tree::Space,
        known: u32,
    ) -> Result<Arc<fence_tree::Done>, fence_tree::FenceError> {
        self.spaces
            .fence_up(job, epoch, rank, from, puts, known)
            .await
    }

    /// Make the rank's directory, pages and control socket; the environment to add and
    /// the state page's descriptor for the rank to inherit (`GANG_STATE_FD` names it).
    /// Must run inside the runtime (the control socket is served by a task). What a
    /// failure leaves behind, `remove` takes away.
    pub fn prepare(
        &self,
        l: &MsgLaunch,
    ) -> std::io::Result<(Vec<(String, String)>, std::os::fd::OwnedFd)> {
        use std::os::fd::AsRawFd;
        let (dir, state_fd) = self.pages.create(l.key, l.uid, l.script.as_deref())?;
        self.controls
            .start(Arc::clone(&self.spaces), &dir, l.key, l.uid)?;
        let env = vec![
            (msg_env::PART.to_string(), l.part.clone()),
            (msg_env::MSG_DIR.to_string(), dir.display().to_string()),
            (
                msg_env::STATE_FD.to_string(),
                state_fd.as_raw_fd().to_string(),
            ),
            (msg_env::HOST_ID.to_string(), self.host_id.clone()),
            (msg_env::MSG_CONTEXT.to_string(), l.context.to_string()),
        ];
        Ok((env, state_fd))
    }

    /// Register a PMIx rank with the node's PMIx server (started now if it is not yet);
    /// the variables for its environment. Must run inside the runtime.
    pub async fn pmix_prepare(&self, l: &PmixLaunch) -> Result<Vec<(String, String)>, String> {
        self.mpi.pmix_prepare(&self.spaces, l).await
    }

    /// Undo `pmix_prepare`: the PMIx server forgets the rank.
    pub fn pmix_remove(&self, key: RankKey) {
        self.mpi.pmix_remove(key);
    }

    /// The rank runs as the group `pgid`: the MPI servers may end it on its abort. `pmi`:
    /// its PMI socket (the agent's end) to serve.
    pub fn started(&self, key: RankKey, pgid: Pid, pmi: Option<(UnixStream, PmiJob)>) {
        self.mpi.pmix_started(key, pgid);
        if let Some((stream, job)) = pmi {
            self.mpi.start_pmi(&self.spaces, stream, job, pgid);
        }
    }

    /// The rank exited: its PMI server's end, and the abort message the rank sent, if it
    /// did.
    pub async fn pmi_finished(&self, key: RankKey) -> Option<Abort> {
        self.mpi.finished(key).await
    }

    /// The rank is gone: its servers, files and held space too.
    pub fn remove(&self, key: RankKey) {
        self.mpi.stop_pmi(key);
        self.mpi.pmix_remove(key);
        self.spaces.forget(key);
        self.controls.stop(key);
        self.pages.remove(key);
    }

    /// A rank's pages, for the switch thread.
    pub fn pages(&self, key: RankKey) -> Option<MsgPages> {
        self.pages.get(key)
    }

    /// What every rank that started the library is doing, for the heartbeat.
    pub fn activity(&self) -> Vec<RankActivity> {
        self.pages.activity()
    }
}

impl Drop for MsgHub {
    fn drop(&mut self) {
        // The node's directory, once its ranks' are gone, and the PMIx server's files in
        // it.
        self.mpi.remove_files();
        self.pages.remove_node_dir();
    }
}
