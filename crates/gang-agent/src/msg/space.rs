//! The jobs' key-value spaces as this node's ranks see them: a rank's fence (from its
//! control socket, its PMI server or the PMIx server) goes to the job's fence at the
//! master with everything the rank put, and is answered once every rank of the job
//! arrived. Each rank's copy of the space is held here, as of the fence it names, so the
//! master answers with only what changed since.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gang_proto::v1::FenceRequest;
use gang_proto::v1::agent_registry_client::AgentRegistryClient;

use crate::error::Coord;
use crate::ranks::RankKey;

/// The master's registry (the type `registry_client` uses; named here so this module
/// stays below `node` in the import graph).
pub type RegistryClient = AgentRegistryClient<tonic::transport::Channel>;

/// A rank's copy of its job's key-value space, and the fence it is as of.
type HeldSpace = (u32, BTreeMap<String, String>);

/// Fences through the master, and each rank's held copy of its job's space.
pub struct Spaces {
    node: Coord,
    /// The master (set once the agent has its channel).
    master: OnceLock<RegistryClient>,
    held: Mutex<HashMap<RankKey, HeldSpace>>,
}

impl Spaces {
    pub fn new(node: Coord) -> Spaces {
        Spaces {
            node,
            master: OnceLock::new(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The master's registry, once connected.
    pub fn set_master(&self, client: RegistryClient) {
        let _ = self.master.set(client);
    }

    /// The rank is gone: so is its copy.
    pub fn forget(&self, key: RankKey) {
        self.held.lock().unwrap().remove(&key);
    }

    /// A rank's fence, through the master: retried while the master is away.
    pub async fn fence(
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
            };
            match client.clone().fence(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let mut held = self.held.lock().unwrap();
                    let held = held.entry(key).or_default();
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

impl crate::pmi::Fencer for Spaces {
    async fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, String> {
        Spaces::fence(self, key, epoch, &puts).await
    }
}
