//! The ranks' MPI servers: each rank's PMI server task (`pmi::serve`) and the node's PMIx
//! server, started at the first `--mpi pmix` launch. Both fence through the jobs'
//! key-value spaces (`space.rs`), and both can end a rank on its abort, whose code and
//! message the supervisor reports.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::net::UnixStream;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use super::space::Spaces;
use crate::error::Coord;
use crate::mpi::pmi::{Abort, PmiJob};
use crate::mpi::pmix::{PmixLaunch, PmixNode};
use crate::ranks::RankKey;

/// How long an exited rank's PMI server may take to read the rest of what it sent.
const PMI_LINGER: Duration = Duration::from_millis(500);

pub struct MpiServers {
    node: Coord,
    /// Where the PMIx server keeps its files (in the node's messaging directory).
    pmix_dir: PathBuf,
    /// The ranks' PMI servers; each ends with the abort message, if any.
    pmi: Mutex<HashMap<RankKey, JoinHandle<Option<Abort>>>>,
    /// The node's PMIx server (or why it could not start).
    pmix: OnceCell<Result<Arc<PmixNode<Spaces>>, String>>,
}

impl MpiServers {
    pub fn new(node: Coord, pmix_dir: PathBuf) -> MpiServers {
        MpiServers {
            node,
            pmix_dir,
            pmi: Mutex::new(HashMap::new()),
            pmix: OnceCell::new(),
        }
    }

    /// Serve the rank's PMI socket (the agent's end of its socketpair).
    pub fn start_pmi(&self, spaces: &Arc<Spaces>, stream: UnixStream, job: PmiJob, pgid: Pid) {
        let key = job.key;
        let task = tokio::spawn(crate::mpi::pmi::serve(
            Arc::clone(spaces),
            stream,
            job,
            pgid,
        ));
        if let Some(old) = self.pmi.lock().unwrap().insert(key, task) {
            old.abort();
        }
    }

    /// Register a PMIx rank with the node's PMIx server (started now if it is not yet);
    /// the variables for its environment. Must run inside the runtime. Neither waits on
    /// the library on this task's thread: starting it waits on a blocking-pool thread,
    /// registering is awaited; both at most the server's call timeout.
    pub async fn pmix_prepare(
        &self,
        spaces: &Arc<Spaces>,
        l: &PmixLaunch,
    ) -> Result<Vec<(String, String)>, String> {
        let server = self
            .pmix
            .get_or_init(|| async {
                let (spaces, dir, node) = (Arc::clone(spaces), self.pmix_dir.clone(), self.node);
                tokio::task::spawn_blocking(move || PmixNode::start(&spaces, dir, node))
                    .await
                    .map_err(|e| format!("the PMIx server's start failed: {e}"))
                    .and_then(|r| r.map(Arc::new))
            })
            .await;
        server.as_ref().map_err(Clone::clone)?.prepare(l).await
    }

    /// A peer's PMIx direct modex, from node `from`: none if the server never started.
    pub async fn pmix_modex(
        &self,
        from: Coord,
        req: &gang_proto::v1::ModexRequest,
    ) -> Result<Vec<u8>, tonic::Status> {
        match self.pmix.get() {
            Some(Ok(p)) => p.serve_modex(from, req).await,
            _ => Err(tonic::Status::not_found(format!(
                "node {}: no PMIx rank here (yet)",
                self.node
            ))),
        }
    }

    /// The PMIx rank runs as the group `pgid`.
    pub fn pmix_started(&self, key: RankKey, pgid: Pid) {
        if let Some(Ok(p)) = self.pmix.get() {
            p.started(key, pgid);
        }
    }

    /// The PMIx server forgets the rank (and its job: one rank a job a node).
    pub fn pmix_remove(&self, key: RankKey) {
        if let Some(Ok(p)) = self.pmix.get() {
            p.remove(key);
        }
    }

    /// The rank exited: its PMI server's end (it sees the socket close, unless a process
    /// the rank left behind holds it, or it waits in a fence), and the abort message the
    /// rank sent, if it did.
    pub async fn finished(&self, key: RankKey) -> Option<Abort> {
        // A PMIx abort is recorded before the rank is killed.
        if let Some(abort) = self
            .pmix
            .get()
            .and_then(|p| p.as_ref().ok()?.take_abort(key))
        {
            self.stop_pmi(key);
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

    /// Stop the rank's PMI server, if it still runs.
    pub fn stop_pmi(&self, key: RankKey) {
        if let Some(t) = self.pmi.lock().unwrap().remove(&key) {
            t.abort();
        }
    }

    /// At the agent's end: the PMIx server's files, if it ever started.
    pub fn remove_files(&self) {
        if self.pmix.get().is_some() {
            let _ = std::fs::remove_dir_all(&self.pmix_dir);
        }
    }
}
