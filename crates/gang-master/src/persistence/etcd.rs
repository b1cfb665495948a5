//! The master's state in an etcd cluster (`--state etcd://HOST:PORT,.../PREFIX`), for
//! several masters of which one leads. Same promise as SQLite: a round's saves are
//! committed before any of its commands is answered, and a round is saved whole or not at
//! all (one transaction; see `MAX_TXN_OPS` for a round too large for one).
//!
//! Keys (under PREFIX): `leader` (the election key, bound to the leader's lease; it holds
//! where the leader serves), `meta/mesh`, `meta/cluster_id`, `meta/table_version`,
//! `meta/table_epoch`, `jobs/ID` (ID zero-padded to 20 digits, one JSON row as SQLite's),
//! `drained/X,Y`. Every write is a transaction conditional on the leader key's create
//! revision being the one this master made: a master that lost the key (its lease ended
//! while it was paused or cut off) cannot write, and steps down.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use gang_etcd::pb::etcdserverpb::TxnRequest;
use gang_etcd::{Election, Etcd, Leader, Target, get_op, put_op};
use tracing::{error, info};

use crate::state::effects::Save;
use crate::state::round::Commit;

/// Operations per transaction: etcd refuses more than `--max-txn-ops` (128 by default).
const MAX_TXN_OPS: usize = 120;
/// Bytes per transaction: etcd refuses requests over `--max-request-bytes` (1.5 MiB).
const MAX_TXN_BYTES: usize = 1 << 20;
/// Every this many commits the history before the newest revision is compacted away: the
/// store keeps the newest value of each key, not every version of a job's row.
const COMPACT_EVERY: u64 = 1000;

pub use crate::persistence::etcd_mirror::Loaded;

pub struct EtcdStore {
    /// Ended jobs whose rows are in keys of their own (`jobs/ID`), to be archived.
    finished: BTreeSet<u64>,
    etcd: Etcd,
    prefix: String,
    leader: Leader,
    /// Set once a write was refused for want of the leader key: nothing more is tried.
    deposed: Arc<AtomicBool>,
    commits: AtomicU64,
    rt: tokio::runtime::Handle,
}

fn key(prefix: &str, rest: &str) -> Vec<u8> {
    format!("{prefix}/{rest}").into_bytes()
}

fn job_key(prefix: &str, id: u64) -> Vec<u8> {
    key(prefix, &format!("jobs/{id:020}"))
}

impl EtcdStore {
    /// Connect, wait to be the leader (`on_wait` hears who leads meanwhile, each time that
    /// changes), then read the state.
    pub async fn open(
        target: &Target,
        me: String,
        lease_s: i64,
        timeout: Duration,
        mut on_wait: impl FnMut(&str),
    ) -> anyhow::Result<(EtcdStore, Loaded)> {
        let etcd = Etcd::connect_tls(&target.endpoints, timeout, target.tls.as_ref())?;
        let election = Election::new(etcd.clone(), &target.prefix, me.clone(), lease_s);
        info!(
            endpoints = ?target.endpoints,
            prefix = %target.prefix,
            "state in etcd: campaigning to lead"
        );
        // Standing by, it follows the state: elected, it starts from that copy.
        let warm =
            crate::persistence::warm_copy::WarmCopy::start(etcd.clone(), target.prefix.clone());
        let leader = election
            .campaign(Duration::from_millis(100), |who| {
                info!(leader = %who, "standing by: another master leads");
                on_wait(who);
            })
            .await
            .context("electing a leader in etcd")?;
        let mut store = EtcdStore {
            finished: BTreeSet::new(),
            etcd,
            prefix: target.prefix.clone(),
            leader,
            deposed: Arc::default(),
            commits: AtomicU64::new(0),
            rt: tokio::runtime::Handle::current(),
        };
        let started = std::time::Instant::now();
        let loaded = match warm.take(store.leader.create_revision, timeout).await {
            Some(copy) => {
                info!(revision = copy.revision, "state taken from the warm copy");
                Loaded {
                    from_warm_copy: true,
                    ..copy.into_loaded()
                }
            }
            None => {
                info!("no warm copy up to the election: reading the state");
                store.load().await?
            }
        };
        info!(
            last_job = loaded.jobs.max_id(),
            ms = started.elapsed().as_millis() as u64,
            "state ready"
        );
        store.finished = loaded.finished_unarchived.clone();
        Ok((store, loaded))
    }

    /// Pack the jobs `first..end` (all ended, each in its own key) into one archive key,
    /// their keys deleted in the same guarded transaction.
    async fn archive(&self, first: u64, end: u64) -> Result<(), String> {
        let p = &self.prefix;
        let rows = self
            .etcd
            .get_range(&job_key(p, first), &job_key(p, end), 1000)
            .await
            .map_err(|e| e.to_string())?;
        let values: Vec<Vec<u8>> = rows.into_iter().map(|kv| kv.value).collect();
        let packed = crate::persistence::etcd_archive::pack(&values).map_err(|e| e.to_string())?;
        if packed.len() > MAX_TXN_BYTES {
            tracing::warn!(
                first,
                end,
                bytes = packed.len(),
                "jobs too large to archive together: kept as they are"
            );
            return Ok(());
        }
        self.guarded(vec![
            put_op(key(p, &format!("archive/{first:020}")), packed),
            gang_etcd::delete_range_op(job_key(p, first), job_key(p, end)),
        ])
        .await
    }

    /// The state as read now, in full (no warm copy to start from).
    async fn load(&self) -> anyhow::Result<Loaded> {
        let mirror = crate::persistence::warm_copy::read_all(&self.etcd, &self.prefix).await?;
        Ok(mirror.into_loaded())
    }

    /// Write one meta value (under the leader's guard), at startup.
    pub async fn set_meta(&self, name: &str, value: &str) -> anyhow::Result<()> {
        let ops = vec![put_op(
            key(&self.prefix, &format!("meta/{name}")),
            value.into(),
        )];
        self.guarded(ops).await.map_err(anyhow::Error::msg)
    }

    /// Why this master no longer leads, once it does not.
    pub fn lost(&self) -> Option<String> {
        if self.deposed.load(Ordering::Relaxed) {
            return Some("another master holds the leader key".into());
        }
        self.leader.lost()
    }

    /// Say in the leader key where this master serves, once its ports are bound (it was
    /// elected with the ports configured, which may be 0): clients and agents told of the
    /// leader by a standby are told the real ones. The key keeps its lease and creation.
    pub async fn advertise(&self, me: String) -> anyhow::Result<()> {
        let mut op = put_op(key(&self.prefix, "leader"), me.into_bytes());
        if let Some(gang_etcd::pb::etcdserverpb::request_op::Request::RequestPut(put)) =
            op.request.as_mut()
        {
            put.lease = self.leader.lease;
        }
        self.guarded(vec![op]).await.map_err(anyhow::Error::msg)
    }

    /// Whether this master may act: it leads, and its lease is confirmed.
    pub fn may_act(&self) -> Result<(), String> {
        if let Some(why) = self.lost() {
            return Err(format!("this master no longer leads ({why})"));
        }
        match self.leader.unconfirmed() {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Give leadership up (a clean stop): a standby is elected at once.
    pub fn resign(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let resign = self.leader.resign();
        async move {
            if let Err(e) = resign.await {
                tracing::warn!("revoking this master's lease at its stop: {e}");
            }
        }
    }

    /// A future that ends when leadership is lost, with why (for the daemon to step down).
    pub fn on_lost(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let deposed = self.deposed.clone();
        let mut lost = self.leader.lost_receiver();
        async move {
            loop {
                if deposed.load(Ordering::Relaxed) {
                    return "another master holds the leader key".to_string();
                }
                if let Some(why) = lost.borrow_and_update().clone() {
                    return why;
                }
                tokio::select! {
                    r = lost.changed() => if r.is_err() { return "the lease keeper ended".into() },
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }

    /// `ops` in transactions conditional on leading, in order.
    async fn guarded(
        &self,
        ops: Vec<gang_etcd::pb::etcdserverpb::RequestOp>,
    ) -> Result<(), String> {
        self.may_act()?;
        let mut chunk = Vec::new();
        let mut bytes = 0;
        let mut chunks = Vec::new();
        for op in ops {
            let size = prost::Message::encoded_len(&op);
            if !chunk.is_empty() && (chunk.len() >= MAX_TXN_OPS || bytes + size > MAX_TXN_BYTES) {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
            bytes += size;
            chunk.push(op);
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        let leader_key = key(&self.prefix, "leader");
        for success in chunks {
            let t = self
                .etcd
                .txn(TxnRequest {
                    compare: vec![self.leader.guard()],
                    success,
                    failure: vec![get_op(leader_key.clone())],
                })
                .await
                .map_err(|e| {
                    format!("etcd did not commit ({e}); is a quorum of its members up?")
                })?;
            if !t.succeeded {
                self.deposed.store(true, Ordering::Relaxed);
                error!("a write was refused: another master holds the leader key; stepping down");
                return Err(
                    "this master no longer leads: another master holds the leader key".into(),
                );
            }
            let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(COMPACT_EVERY)
                && let Some(h) = t.header
            {
                let etcd = self.etcd.clone();
                tokio::spawn(async move {
                    if let Err(e) = etcd.compact(h.revision).await {
                        tracing::warn!("compacting etcd's history: {e}");
                    }
                });
            }
        }
        Ok(())
    }
}

impl Commit for EtcdStore {
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String> {
        let (mut ended, mut running) = (Vec::new(), Vec::new());
        // The newest value of each key, in the order first written.
        let mut order: Vec<Vec<u8>> = Vec::new();
        let mut values: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
        let mut set = |k: Vec<u8>, v: Option<Vec<u8>>| {
            if values.insert(k.clone(), v).is_none() {
                order.push(k);
            }
        };
        let p = &self.prefix;
        for save in saves {
            match save {
                Save::Job(job) => {
                    let text = serde_json::to_vec(job).expect("job records serialize");
                    set(job_key(p, job.id.0), Some(text));
                    if job.state().is_final() {
                        ended.push(job.id.0);
                    } else {
                        running.push(job.id.0);
                    }
                }
                Save::Spec { array, spec } => {
                    let text = serde_json::to_vec(spec.as_ref()).expect("specs serialize");
                    set(key(p, &format!("specs/{:020}", array.0)), Some(text));
                }
                Save::Drained {
                    node: (x, y),
                    drained,
                } => {
                    let k = key(p, &format!("drained/{x},{y}"));
                    set(k, drained.then(Vec::new));
                }
                Save::TableMeta { version, grid } => {
                    set(
                        key(p, "meta/table_version"),
                        Some(version.to_string().into_bytes()),
                    );
                    let epoch = format!("{}:{}", grid.epoch_ns, grid.quantum_ns);
                    set(key(p, "meta/table_epoch"), Some(epoch.into_bytes()));
                }
            }
        }
        let ops = order
            .into_iter()
            .map(|k| match values.remove(&k).flatten() {
                Some(v) => put_op(k, v),
                None => gang_etcd::delete_op(k),
            })
            .collect();
        // The actor's task waits for the store here, as it does for SQLite's fsync.
        let rt = self.rt.clone();
        tokio::task::block_in_place(|| rt.block_on(self.guarded(ops)))?;
        for id in running {
            self.finished.remove(&id);
        }
        self.finished.extend(ended);
        // At most one archive per round: its cost is spread over the rounds that end jobs.
        if let Some((first, end)) = crate::persistence::etcd_archive::next_run(
            &self.finished,
            crate::persistence::etcd_archive::ARCHIVE_CHUNK,
        ) {
            match tokio::task::block_in_place(|| rt.block_on(self.archive(first, end))) {
                Ok(()) => {
                    for id in first..end {
                        self.finished.remove(&id);
                    }
                }
                // The round is saved: only the archive waits for a later one.
                Err(e) => tracing::warn!(first, end, "archiving ended jobs: {e}"),
            }
        }
        Ok(())
    }
}
