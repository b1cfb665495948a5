//! PMIx for Open MPI (`--mpi pmix`): the node's PMIx server (`gang-pmix`, OpenPMIx's
//! server library) and what the agent does for it.
//!
//! One server per agent, started at the first PMIx launch, keeps its files in the node's
//! own directory under the messaging base (`msg_dir/X-Y/pmix`), so that the sixteen
//! agents of a local cluster on one host never meet. Before the fork, the job and its
//! rank here are registered (job size, one rank per node, the node map), and the
//! variables `PMIx_server_setup_fork` gives go into the rank's environment.
//!
//! The server is called from no runtime thread: `gang_pmix` runs every call into the
//! library on a thread of its own, and a registration is awaited here at most
//! [`CALL_TIMEOUT`]. A library that stalls (a client holding its progress thread) then
//! fails the launches that need it, naming the node and "PMIx server not answering",
//! while the agent's other launches, switching and heartbeats go on.
//!
//! A fence: the library hands up the local rank's blob (its packing of what the rank
//! put). It goes through the job's fence at the master as one put, `pmix.E.R` (fence
//! epoch E, rank R; base64), and the master's answer, every rank's put, is cut down to
//! this epoch's blobs, concatenated in rank order and handed back: the library unpacks
//! them itself. A fence that does not ask for the data (no `PMIX_COLLECT_DATA`) is a
//! barrier: nothing is put or handed back, and a rank's data is fetched from its node
//! when a peer asks (`modex`). An abort (`MPI_Abort`) fails the job as PMI-1's does: the rank's group
//! is killed and its exit reported with the code and the message.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine as _;
use nix::unistd::Pid;
use tracing::{debug, info, warn};

use crate::error::Coord;
use crate::mpi::modex::{self, Addresses, ModexPeers, Part};
use crate::mpi::pmi::{Abort, Fencer};
use crate::ranks::RankKey;

/// The longest a PMIx registration is waited for. It takes milliseconds; a loaded 2-core
/// host running a 16-node local cluster has been seen to take well under a second.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// A node's name in jobs' node maps: its coordinate (the agents of a local cluster share
/// one host name, and the library takes nodes of one name for one node).
pub fn node_name(x: u32, y: u32) -> String {
    format!("gang-{x}-{y}")
}

/// Where each rank of the job runs: rank r on (x0 + r mod w, y0 + r div w) of its
/// submesh, the master's order.
pub fn node_names(
    part: Option<(u32, u32, u32, u32)>,
    size: u32,
    me: Coord,
    my_rank: u32,
) -> Vec<String> {
    (0..size)
        .map(|r| match part {
            Some((x0, y0, w, _)) if w > 0 => node_name(x0 + r % w, y0 + r / w),
            _ if r == my_rank => node_name(me.x, me.y),
            _ => format!("gang-rank-{r}"),
        })
        .collect()
}

/// Open MPI settings a direct-launched rank needs here, where the job did not set them.
///
/// Open MPI 4.1 takes a process for direct-launched only when a launcher it knows (Slurm,
/// IBM's JSM, Flux, ALPS) claims it; anything else is a singleton, whatever PMIx says.
/// JSM's claim is the one with no other effect: its only mark is `JSM_JSRUN_PORT`, read
/// by nothing but Open MPI's `schizo/jsm`, which then selects `ess/pmi`, no binding and
/// "externally bound" (the agent places ranks; Open MPI must not pin them). Slurm's
/// (`SLURM_NODELIST`, `SLURM_STEP_ID`) would tell every library in the rank it runs under
/// Slurm; Flux's selects Flux's PMI-1 library.
pub fn open_mpi_defaults(
    job_env: &std::collections::HashMap<String, String>,
) -> Vec<(String, String)> {
    let defaults = [("JSM_JSRUN_PORT", "0")];
    defaults
        .into_iter()
        .filter(|(k, _)| !job_env.contains_key(*k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a PMIx rank needs registered before its fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixLaunch {
    pub key: RankKey,
    /// The job's namespace (`RankRequest::namespace`).
    pub nspace: String,
    pub size: u32,
    pub part: Option<(u32, u32, u32, u32)>,
    /// The rank's user and group.
    pub uid: u32,
    pub gid: u32,
}

/// A rank served here.
struct Local {
    key: RankKey,
    /// The last fence's epoch (the library's fences come in the same order on every
    /// node, so the n-th of each is the job's n-th fence).
    epoch: u32,
    pgid: Option<Pid>,
    part: Option<Part>,
    /// Where the job's ranks' agents listen, once its first fence brought it.
    addresses: tokio::sync::watch::Sender<Option<Addresses>>,
}

/// The library's host: fences (through `F`, the jobs' key-value spaces: this module
/// stays below `msg` in the import graph) and aborts.
struct Host<F> {
    hub: Weak<F>,
    rt: tokio::runtime::Handle,
    ranks: Mutex<HashMap<String, Local>>,
    aborts: Mutex<HashMap<RankKey, Abort>>,
    /// Direct modex requests this node's ranks' data answered (for tests and logs).
    served: std::sync::atomic::AtomicU64,
}

/// The agent's PMIx server.
pub struct PmixNode<F> {
    server: gang_pmix::Server,
    host: Arc<Host<F>>,
    node: Coord,
}

impl<F> std::fmt::Debug for PmixNode<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixNode")
            .field("node", &self.node)
            .finish()
    }
}

impl<F: Fencer + ModexPeers> PmixNode<F> {
    /// Start the server with its files in `dir`. Must run inside the runtime (fences are
    /// gathered by tasks), and may wait up to [`CALL_TIMEOUT`]: not on a worker thread.
    pub fn start(hub: &Arc<F>, dir: std::path::PathBuf, node: Coord) -> Result<Self, String> {
        if !gang_pmix::AVAILABLE {
            return Err(gang_pmix::Error::NotBuilt.to_string());
        }
        use std::os::unix::fs::PermissionsExt;
        // A leftover of an earlier agent; the ranks (any user) read the library's files.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| {
                format!(
                    "cannot make the PMIx server's directory {}: {e}",
                    dir.display()
                )
            })?;
        let host = Arc::new(Host {
            hub: Arc::downgrade(hub),
            rt: tokio::runtime::Handle::current(),
            ranks: Mutex::new(HashMap::new()),
            aborts: Mutex::new(HashMap::new()),
            served: Default::default(),
        });
        let config = gang_pmix::ServerConfig {
            tmpdir: dir.clone(),
            node_name: node_name(node.x, node.y),
            server_nspace: format!("gang-agent-{}-{}", node.x, node.y),
            server_rank: 0,
            call_timeout: CALL_TIMEOUT,
        };
        let started = std::time::Instant::now();
        let server =
            gang_pmix::Server::start(&config, Arc::clone(&host) as Arc<dyn gang_pmix::Host>)
                .map_err(|e| e.to_string())?;
        info!(dir = %dir.display(), ms = started.elapsed().as_millis() as u64, "PMIx server started");
        Ok(PmixNode { server, host, node })
    }

    /// Register the rank's job and the rank; the variables for its environment. Awaits
    /// the server's thread at most its call timeout.
    pub async fn prepare(&self, l: &PmixLaunch) -> Result<Vec<(String, String)>, String> {
        let ns = l.nspace.clone();
        let reg = gang_pmix::Registration {
            nspace: ns.clone(),
            size: l.size,
            my_rank: l.key.rank,
            nodes: node_names(l.part, l.size, self.node, l.key.rank),
            uid: l.uid,
            gid: l.gid,
        };
        let what = format!("registering rank {} of {ns}", l.key.rank);
        self.host.ranks.lock().unwrap().insert(
            ns.clone(),
            Local {
                key: l.key,
                epoch: 0,
                pgid: None,
                part: Part::new(l.part, l.size),
                addresses: tokio::sync::watch::channel(None).0,
            },
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waited = self.server.call_timeout();
        let answer = match self.server.prepare(reg, move |r| {
            let _ = tx.send(r);
        }) {
            Err(e) => Err(e),
            Ok(()) => match tokio::time::timeout(waited, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(gang_pmix::Error::Pmix("its thread has ended".into())),
                Err(_) => Err(gang_pmix::Error::NotAnswering { what, waited }),
            },
        };
        match answer {
            Ok(env) => Ok(client_env(env)),
            // The registration may still be made when the library gets to it: `remove`
            // (the launch's rollback) then queues its undoing after it.
            Err(e @ gang_pmix::Error::NotAnswering { .. }) => {
                warn!(job_id = l.key.job_id, rank = l.key.rank, "{e}");
                Err(e.to_string())
            }
            Err(e) => {
                self.host.ranks.lock().unwrap().remove(&ns);
                Err(e.to_string())
            }
        }
    }

    /// A peer's direct modex (`NodeRelay.Modex`) from node `from`: this node's rank's
    /// blob, once it has put it, if `from` runs a rank of the same job.
    pub async fn serve_modex(
        &self,
        from: Coord,
        req: &gang_proto::v1::ModexRequest,
    ) -> Result<Vec<u8>, tonic::Status> {
        let found = self
            .host
            .ranks
            .lock()
            .unwrap()
            .get(&req.nspace)
            .map(|l| (l.key, l.part));
        let Some((key, part)) = found.filter(|(k, _)| k.job_id == req.job_id && k.rank == req.rank)
        else {
            return Err(tonic::Status::not_found(format!(
                "node {}: no rank {} of job {} here (yet)",
                self.node, req.rank, req.job_id
            )));
        };
        if part.and_then(|p| p.rank_on(from)).is_none() {
            return Err(tonic::Status::permission_denied(format!(
                "node {}: node {from} runs no rank of job {}",
                self.node, key.job_id
            )));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.server
            .dmodex(&req.nspace, req.rank, move |r| {
                let _ = tx.send(r);
            })
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let answered = match tokio::time::timeout(modex::MODEX_WAIT, rx).await {
            Ok(Ok(r)) => Ok(r),
            _ => Err(()),
        };
        let blob = modex::answer(answered, req.rank)?;
        let n = 1 + self
            .host
            .served
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        info!(job_id = key.job_id, rank = req.rank, %from, bytes = blob.len(), served = n, "PMIx direct modex served");
        Ok(blob)
    }

    /// The rank runs as the group `pgid` (what an abort kills).
    pub fn started(&self, key: RankKey, pgid: Pid) {
        if let Some(l) = self
            .host
            .ranks
            .lock()
            .unwrap()
            .values_mut()
            .find(|l| l.key == key)
        {
            l.pgid = Some(pgid);
        }
    }

    /// The abort the rank sent, if it did.
    pub fn take_abort(&self, key: RankKey) -> Option<Abort> {
        self.host.aborts.lock().unwrap().remove(&key)
    }

    /// The rank is gone: the library forgets it and its job (one rank a job a node).
    pub fn remove(self: &Arc<Self>, key: RankKey) {
        let ns = {
            let mut ranks = self.host.ranks.lock().unwrap();
            let Some(ns) = ranks
                .iter()
                .find(|(_, l)| l.key == key)
                .map(|(ns, _)| ns.clone())
            else {
                return;
            };
            ranks.remove(&ns);
            ns
        };
        self.host.aborts.lock().unwrap().remove(&key);
        // Queued for the server's thread: nothing waits on it here.
        self.server.deregister(&ns, key.rank);
    }
}

/// The rank's PMIx variables, its client held to the `hash` data store: the library's
/// shared-memory stores (`ds21`, `ds12`) are made by the server, as the agent's user,
/// with locks a rank of another user cannot take (its client then prints "PMIX ERROR:
/// ... gds_ds12_lock_pthread.c" and falls back). With `hash`, a rank asks the server
/// over its socket for job data it reads: a few messages at init.
fn client_env(env: Vec<(String, String)>) -> Vec<(String, String)> {
    env.into_iter()
        .filter(|(k, _)| !k.starts_with("PMIX_DSTORE_"))
        .map(|(k, v)| match k.as_str() {
            "PMIX_GDS_MODULE" => (k, "hash".to_string()),
            _ => (k, v),
        })
        .collect()
}

/// A blob's key in the job's space: fence epoch, then rank.
fn blob_key(epoch: u32, rank: u32) -> String {
    format!("pmix.{epoch}.{rank}")
}

/// Every rank's blob of fence `epoch`, concatenated in rank order.
fn gather(space: &BTreeMap<String, String>, epoch: u32) -> Result<Vec<u8>, String> {
    let prefix = format!("pmix.{epoch}.");
    let mut blobs: Vec<(u32, Vec<u8>)> = Vec::new();
    for (k, v) in space.range(prefix.clone()..) {
        let Some(rank) = k.strip_prefix(&prefix) else {
            break;
        };
        let rank: u32 = rank
            .parse()
            .map_err(|_| format!("PMIx fence {epoch}: a key {k:?} that names no rank"))?;
        let blob = base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|e| format!("PMIx fence {epoch}: rank {rank}'s blob is not base64: {e}"))?;
        blobs.push((rank, blob));
    }
    blobs.sort_by_key(|(r, _)| *r);
    Ok(blobs.into_iter().flat_map(|(_, b)| b).collect())
}

impl<F: Fencer + ModexPeers> gang_pmix::Host for Host<F> {
    fn fence(&self, ns: &str, blob: Vec<u8>, collect: bool, done: gang_pmix::FenceDone) {
        let (key, epoch, addresses) = {
            let mut ranks = self.ranks.lock().unwrap();
            let Some(l) = ranks.get_mut(ns) else {
                warn!(nspace = ns, "PMIx fence for a job not served here: failed");
                return; // `done` fails the fence as it drops.
            };
            l.epoch += 1;
            (l.key, l.epoch, l.addresses.clone())
        };
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        // Only this fence's blob, and only if the fence collects (a barrier's data is
        // fetched when asked): the master keeps the job's space, and earlier blobs are in
        // it already. The first fence also says where this rank's agent listens.
        let bytes = if collect { blob.len() } else { 0 };
        let mut puts = BTreeMap::new();
        if collect {
            puts.insert(
                blob_key(epoch, key.rank),
                base64::engine::general_purpose::STANDARD.encode(&blob),
            );
        }
        if epoch == 1
            && let Some(address) = hub.own_address()
        {
            puts.insert(modex::address_key(key.rank), address);
        }
        self.rt.spawn(async move {
            let started = std::time::Instant::now();
            let result = Fencer::fence(&*hub, key, epoch, puts)
                .await
                .and_then(|space| {
                    if addresses.borrow().is_none() {
                        let a = modex::addresses(&space);
                        if !a.is_empty() {
                            addresses.send_replace(Some(Arc::new(a)));
                        }
                    }
                    if collect {
                        gather(&space, epoch)
                    } else {
                        Ok(Vec::new())
                    }
                });
            match result {
                Ok(all) => {
                    debug!(
                        job_id = key.job_id,
                        rank = key.rank,
                        epoch,
                        collect,
                        bytes,
                        all = all.len(),
                        us = started.elapsed().as_micros() as u64,
                        "PMIx fence done"
                    );
                    done.complete(Ok(&all));
                }
                Err(e) => {
                    warn!(
                        job_id = key.job_id,
                        rank = key.rank,
                        epoch,
                        "PMIx fence failed: {e}"
                    );
                    done.complete(Err(()));
                }
            }
        });
    }

    fn direct_modex(&self, ns: &str, rank: u32, done: gang_pmix::FenceDone) {
        let Some((key, part, mut addresses)) = self
            .ranks
            .lock()
            .unwrap()
            .get(ns)
            .map(|l| (l.key, l.part, l.addresses.subscribe()))
        else {
            return done.fail(gang_pmix::NOT_FOUND);
        };
        let (Some(part), Some(hub)) = (part, self.hub.upgrade()) else {
            return done.fail(gang_pmix::NOT_FOUND);
        };
        if rank >= part.size {
            return done.fail(gang_pmix::NOT_FOUND);
        }
        let req = gang_proto::v1::ModexRequest {
            job_id: key.job_id,
            nspace: ns.to_string(),
            rank,
        };
        self.rt.spawn(async move {
            let since = std::time::Instant::now();
            let known =
                tokio::time::timeout(modex::MODEX_WAIT, addresses.wait_for(Option::is_some));
            let address = match known.await {
                Ok(Ok(a)) => a.as_ref().and_then(|a| a.get(&rank).cloned()),
                _ => None,
            };
            let Some(address) = address else {
                warn!(
                    job_id = key.job_id,
                    rank, "PMIx direct modex: where the rank runs is not known"
                );
                return done.fail(gang_pmix::NOT_FOUND);
            };
            match modex::fetch(&*hub, part.node_of(rank), address, req, since).await {
                Ok(blob) => {
                    debug!(
                        job_id = key.job_id,
                        rank,
                        bytes = blob.len(),
                        "PMIx direct modex fetched"
                    );
                    done.complete(Ok(&blob));
                }
                Err(status) => {
                    warn!(
                        job_id = key.job_id,
                        rank, status, "PMIx direct modex failed"
                    );
                    done.fail(status);
                }
            }
        });
    }

    fn abort(&self, ns: &str, rank: u32, status: i32, message: String) {
        let Some((key, pgid)) = self.ranks.lock().unwrap().get(ns).map(|l| (l.key, l.pgid)) else {
            warn!(
                nspace = ns,
                rank, "PMIx abort from a job not served here: ignored"
            );
            return;
        };
        let mut what = format!("called PMIx abort (MPI_Abort) with exit code {status}");
        let message = message.trim();
        if !message.is_empty() && message != "N/A" {
            what.push_str(": ");
            what.push_str(message);
        }
        warn!(job_id = key.job_id, rank = key.rank, why = %what, "the rank aborted: ending it");
        self.aborts
            .lock()
            .unwrap()
            .insert(key, Abort { code: status, what });
        // Its exit is reported with the code it gave (the master then ends the job's
        // other ranks), as under PMI-1.
        if let Some(pgid) = pgid {
            crate::ranks::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    fn client(&self, ns: &str, rank: u32, finalized: bool) {
        debug!(nspace = ns, rank, finalized, "PMIx client");
    }

    fn refused(&self, why: &str) {
        warn!("PMIx gate refused {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_named_by_their_nodes_in_the_masters_order() {
        let me = Coord { x: 3, y: 2 };
        assert_eq!(
            node_names(Some((2, 1, 2, 2)), 4, me, 3),
            ["gang-2-1", "gang-3-1", "gang-2-2", "gang-3-2"]
        );
        assert_eq!(node_names(None, 1, me, 0), ["gang-3-2"]);
    }

    #[test]
    fn a_fence_gathers_its_own_epochs_blobs_in_rank_order() {
        let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
        let space = BTreeMap::from([
            (blob_key(1, 0), b64(b"old")),
            (blob_key(2, 1), b64(b"B")),
            (blob_key(2, 0), b64(b"A")),
            (blob_key(2, 10), b64(b"K")),
            (blob_key(3, 0), b64(b"new")),
            ("P0-bc".to_string(), "x".to_string()),
        ]);
        assert_eq!(gather(&space, 2).unwrap(), b"ABK");
        assert!(gather(&BTreeMap::from([(blob_key(1, 0), "!".into())]), 1).is_err());
    }
}
