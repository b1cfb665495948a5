//! The jobs' key-value spaces as this node's ranks see them: a rank's fence (from its
//! control socket, its PMI server or the PMIx server) goes, with everything the rank put,
//! up the job's tree of agents (`fence_tree`, when the master launched it with one) or to
//! the job's fence at the master, and is answered once every rank of the job arrived.
//! For fences through the master, each rank's copy of the space is held here, as of the
//! fence it names, so the master answers with only what changed since.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gang_proto::v1::agent_registry_client::AgentRegistryClient;
use gang_proto::v1::{FenceDoneRequest, FenceRequest};
use tracing::debug;

use super::fence_tree::{Arrival, Done, FenceError, FenceTrees, Space, Tree, Upward};
use crate::error::Coord;
use crate::peers::PeerPool;
use crate::ranks::RankKey;

/// The master's registry (the type `registry_client` uses; named here so this module
/// stays below `node` in the import graph).
pub type RegistryClient = AgentRegistryClient<crate::master_link::channel::MasterChannel>;

/// A rank's copy of its job's key-value space, and the fence it is as of (shared with the
/// rank's server until a fence changes it: on an emulated fleet, a thousand nodes' copies
/// share one process).
type HeldSpace = (u32, Arc<BTreeMap<String, String>>);

/// Fences through the master, and each rank's held copy of its job's space.
pub struct Spaces {
    node: Coord,
    /// The master (set once the agent has its channel).
    master: Arc<OnceLock<RegistryClient>>,
    held: Mutex<HashMap<RankKey, HeldSpace>>,
    /// Jobs whose fences are gathered among their agents, and the channels to those.
    trees: Arc<FenceTrees>,
    peers: OnceLock<Arc<PeerPool>>,
    record: Arc<dyn Upward>,
    /// Where this agent listens, as its peers reach it (PMIx direct modex).
    address: OnceLock<String>,
}

/// Rank 0's agent tells the master a fence among the agents completed (the record, and
/// all the master hears of it): a few tries, then only a log line.
struct MasterRecord {
    node: Coord,
    master: Arc<OnceLock<RegistryClient>>,
}

impl Upward for MasterRecord {
    fn fence_done(&self, job: u64, epoch: u32, bytes: u64) {
        let Some(client) = self.master.get().cloned() else {
            return;
        };
        let req = FenceDoneRequest {
            x: self.node.x,
            y: self.node.y,
            job_id: job,
            epoch,
            bytes,
        };
        tokio::spawn(async move {
            for _ in 0..5 {
                match client.clone().fence_done(req).await {
                    Ok(_) => return,
                    Err(s) if s.code() == tonic::Code::Unavailable => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(s) => {
                        debug!(job, epoch, "fence record not taken: {}", s.message());
                        return;
                    }
                }
            }
        });
    }
}

impl Spaces {
    pub fn new(node: Coord) -> Spaces {
        let master = Arc::new(OnceLock::new());
        Spaces {
            node,
            record: Arc::new(MasterRecord {
                node,
                master: Arc::clone(&master),
            }),
            master,
            held: Mutex::new(HashMap::new()),
            trees: Arc::new(FenceTrees::new(node)),
            peers: OnceLock::new(),
            address: OnceLock::new(),
        }
    }

    /// Where this agent listens, as its peers reach it.
    pub fn set_address(&self, address: String) {
        let _ = self.address.set(address);
    }

    /// The master's registry, once connected.
    pub fn set_master(&self, client: RegistryClient) {
        let _ = self.master.set(client);
    }

    /// The channels to other agents (fences among a job's agents).
    pub fn set_peers(&self, peers: Arc<PeerPool>) {
        let _ = self.peers.set(peers);
    }

    /// The job's rank `key` fences among the job's agents, in `tree`.
    pub fn join_tree(&self, key: RankKey, tree: Tree) {
        self.trees.join(key.job_id, tree);
    }

    /// The rank is gone: so is its copy, and its place in its job's tree.
    pub fn forget(&self, key: RankKey) {
        self.held.lock().unwrap().remove(&key);
        self.trees.leave(key.job_id);
    }

    /// A child's part of a fence among the agents (`NodeRelay.FenceUp`), from node `from`.
    pub async fn fence_up(
        &self,
        job: u64,
        epoch: u32,
        rank: u32,
        from: Coord,
        puts: Space,
        known: u32,
    ) -> Result<Arc<Done>, FenceError> {
        let Some(peers) = self.peers.get() else {
            return Err(FenceError::NoJob(job));
        };
        self.trees
            .arrive(
                job,
                epoch,
                Arrival::Child {
                    rank,
                    from,
                    puts,
                    known,
                },
                peers,
                &self.record,
            )
            .await
    }

    /// A rank's fence, through the master: retried while the master is away.
    pub async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: &BTreeMap<String, String>,
    ) -> Result<Arc<BTreeMap<String, String>>, String> {
        if self.trees.has(key.job_id)
            && let Some(peers) = self.peers.get()
        {
            return self
                .trees
                .arrive(
                    key.job_id,
                    epoch,
                    Arrival::Own(puts.clone()),
                    peers,
                    &self.record,
                )
                .await
                .map(|done| Arc::clone(&done.space))
                .map_err(|e| e.to_string());
        }
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
                .held
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
                wait_ms: FENCE_POLL_MS,
            };
            match client.clone().fence(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    if r.pending {
                        // Not every rank is in yet: ask again (the master holds the
                        // rank's arrival; asking again is the same arrival).
                        delay = Duration::from_millis(20);
                        continue;
                    }
                    let mut held = self.held.lock().unwrap();
                    let held = held.entry(key).or_default();
                    if r.delta && held.0 != known {
                        // Not the space the delta is against (never expected: a rank's
                        // fences come one at a time).
                        whole = true;
                        continue;
                    }
                    if !r.delta {
                        held.1 = Arc::new(r.kvs.into_iter().collect());
                    } else if !r.kvs.is_empty() {
                        Arc::make_mut(&mut held.1).extend(r.kvs);
                    }
                    held.0 = epoch;
                    return Ok(Arc::clone(&held.1));
                }
                // The master away, paused, or failing over (a call past the channel's
                // deadline; one that held the call without `wait_ms`): a fence waits as
                // long as its job lives, and the master says when the job ends.
                Err(s) if master_away(s.code()) => {
                    debug!(
                        job = key.job_id,
                        epoch,
                        "fence: {}; asking again",
                        s.message()
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                // The job is ending, or the fence is refused: the rank hears it failed.
                Err(s) => return Err(s.message().to_string()),
            }
        }
    }
}

/// How long the master may hold a fence call before it answers `pending`: well inside the
/// channel's 5 s deadline, even when a loaded master answers late.
pub const FENCE_POLL_MS: u32 = 2_000;

/// A fence call that failed because the master did not answer in time or was away, not
/// because it refused: asked again.
fn master_away(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(code, Unavailable | DeadlineExceeded | Cancelled | Unknown)
}

impl crate::mpi::pmi::Fencer for Spaces {
    async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: BTreeMap<String, String>,
    ) -> Result<Arc<BTreeMap<String, String>>, String> {
        Spaces::fence(self, key, epoch, &puts).await
    }
}

impl crate::mpi::modex::ModexPeers for Spaces {
    fn own_address(&self) -> Option<String> {
        self.address.get().cloned()
    }

    async fn modex(
        &self,
        node: Coord,
        address: String,
        req: gang_proto::v1::ModexRequest,
    ) -> Result<Vec<u8>, tonic::Status> {
        let peers = self
            .peers
            .get()
            .ok_or_else(|| tonic::Status::unavailable("no channels to other agents yet"))?;
        let mut client = peers
            .tree_client(node.x, node.y, &address)
            .map_err(tonic::Status::unavailable)?;
        Ok(client.modex(req).await?.into_inner().blob)
    }
}
