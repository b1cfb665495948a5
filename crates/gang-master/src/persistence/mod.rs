//! Where the master's state is kept: an SQLite file (the default), or an etcd cluster
//! shared by several masters of which one leads (`persistence/etcd.rs`). The reactor and its
//! commit (`state::round::Commit`) do not care which; this opens either and reads what a
//! restarted (or newly elected) master starts from. What a standby answers meanwhile is
//! `standby.rs`, beside the servers.
//!
//! | file | what |
//! |---|---|
//! | `sqlite.rs` | the SQLite store (WAL, one transaction a round) |
//! | `etcd.rs` | the etcd store: leader election, leadership-checked writes |
//! | `etcd_mirror.rs`, `etcd_archive.rs` | the keys under the prefix read back; finished jobs packed |
//! | `warm_copy.rs` | a standby's copy of the prefix, followed by watch |

pub mod etcd;
pub mod etcd_archive;
pub mod etcd_mirror;
pub mod sqlite;
pub mod warm_copy;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::daemon_config::DaemonConfig;
use crate::job::SavedJob;
use crate::persistence::etcd::EtcdStore;
use crate::persistence::sqlite::Store;
use crate::state::Persisted;
use crate::state::effects::Save;
use crate::state::round::Commit;

pub enum StateStore {
    Sqlite(Store),
    Etcd(EtcdStore),
}

impl Commit for StateStore {
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String> {
        match self {
            StateStore::Sqlite(s) => s.commit(saves),
            StateStore::Etcd(s) => s.commit(saves),
        }
    }

    fn may_act(&self) -> Result<(), String> {
        match self {
            StateStore::Sqlite(_) => Ok(()),
            StateStore::Etcd(s) => s.may_act(),
        }
    }
}

/// What the master starts from.
pub struct Initial {
    pub cluster_id: Arc<str>,
    pub persisted: Persisted,
    /// Every saved job, in id order, taken one at a time by recovery.
    pub records: Box<dyn Iterator<Item = SavedJob> + Send>,
    pub drained: Vec<(u32, u32)>,
}

/// Saved jobs with their arrays' specs put back (`job::read_back::attach_spec`), each job not ended
/// checked as read back (`check_read_back`): a row a store's other writer forged or broke
/// is failed, never run.
fn attached(
    records: impl Iterator<Item = SavedJob> + Send + 'static,
    specs: std::collections::HashMap<u64, Arc<crate::job::Spec>>,
    allow_root: bool,
) -> Box<dyn Iterator<Item = SavedJob> + Send> {
    let mut users = std::collections::HashMap::new();
    Box::new(records.map(move |mut r| {
        crate::job::read_back::attach_spec(&mut r, &specs);
        if !r.state().is_final()
            && let Err(why) = check_read_back(&r, allow_root, &mut users)
        {
            tracing::error!(job = %r.id, "a saved job is refused: {why}");
            crate::job::read_back::fail_read_back(
                &mut r,
                format!("refused when the master read it back: {why}"),
            );
        }
        r
    }))
}

/// What a job's row must hold to be run: an owner the account database knows as it is
/// saved (name, primary group, supplementary groups), root only where root may run jobs,
/// and what a submission is checked for (a command, an absolute directory, a name). The
/// rows of the master's store are written by the master alone; this is for the day they
/// are not (an etcd others can write, a database edited by hand).
fn check_read_back(
    r: &SavedJob,
    allow_root: bool,
    users: &mut std::collections::HashMap<u32, Option<gang_auth::users::Identity>>,
) -> Result<(), String> {
    let o = &r.owner;
    if o.uid == 0 && !allow_root {
        return Err("it runs as root, and allow_root_jobs is off".into());
    }
    let known = match users.get(&o.uid) {
        Some(k) => k.clone(),
        None => {
            let k = gang_auth::users::Identity::lookup_uid(o.uid)?;
            users.insert(o.uid, k.clone());
            k
        }
    };
    let Some(who) = known else {
        return Err(format!("uid {} is no user on this host", o.uid));
    };
    if who.user != o.user {
        return Err(format!("uid {} is {}, not {}", o.uid, who.user, o.user));
    }
    let mine = |g: &u32| *g == who.gid || who.groups.contains(g);
    if !mine(&o.gid) {
        return Err(format!("{} is not in group {}", o.user, o.gid));
    }
    if let Some(g) = o.groups.iter().find(|g| !mine(g)) {
        return Err(format!("{} is not in group {g}", o.user));
    }
    let allocation_alone = r.allocate && r.argv.is_empty();
    if !allocation_alone && r.argv.first().is_none_or(|a| a.is_empty()) {
        return Err("it has no command".into());
    }
    if !r.cwd.starts_with('/') {
        return Err(format!("its directory {:?} is not absolute", r.cwd));
    }
    crate::job::check_name(&r.name).map_err(|e| format!("its name: {e}"))?;
    Ok(())
}

/// What the leader key of an etcd-backed master says of it: where clients and agents
/// reach it.
pub fn advertise(cfg: &DaemonConfig) -> String {
    advertise_at(cfg.listen, cfg.agent_listen)
}

/// The same, for the ports bound.
pub fn advertise_at(clients: std::net::SocketAddr, agents: std::net::SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!(
        "clients={clients} agents={agents} host={host} pid={}",
        std::process::id()
    )
}

fn check_mesh(found: Option<&str>, cfg: &DaemonConfig, place: &str) -> anyhow::Result<bool> {
    let mesh = cfg.master.mesh.to_string();
    match found {
        Some(m) if m != mesh => anyhow::bail!(
            "the state in {place} was made for a {m} mesh, not {mesh}; use another --state"
        ),
        Some(_) => Ok(false),
        None => Ok(true),
    }
}

/// Open the store `cfg` names (for etcd: once this master leads; `on_wait` hears who
/// leads meanwhile) and read it.
pub async fn open(
    cfg: &DaemonConfig,
    on_wait: impl FnMut(&str),
) -> anyhow::Result<(StateStore, Initial)> {
    let quantum_ns = i64::from(cfg.master.quantum_ms) * 1_000_000;
    let Some(target) = &cfg.etcd else {
        std::fs::create_dir_all(cfg.state_dir())?;
        let store = Store::open(&cfg.state)?;
        if check_mesh(
            store.mesh()?.as_deref(),
            cfg,
            &cfg.state.display().to_string(),
        )? {
            store.set_mesh(&cfg.master.mesh.to_string())?;
        }
        let initial = Initial {
            cluster_id: store.cluster_id()?.into(),
            persisted: Persisted {
                next_job_id: store.next_job_id()?,
                table_version: store.table_version()?,
                table_epoch_ns: store.table_epoch(quantum_ns)?,
            },
            records: attached(
                store.load_jobs()?.into_iter(),
                store.load_specs()?,
                cfg.master.auth.allow_root_jobs,
            ),
            drained: store.drained()?,
        };
        return Ok((StateStore::Sqlite(store), initial));
    };
    std::fs::create_dir_all(cfg.state_dir())?;
    let timeout = Duration::from_millis(u64::from(cfg.etcd_timeout_ms));
    let (store, loaded) = EtcdStore::open(
        target,
        advertise(cfg),
        i64::from(cfg.etcd_lease_s),
        timeout,
        on_wait,
    )
    .await?;
    let place = format!("etcd {}", target.prefix);
    if check_mesh(loaded.mesh.as_deref(), cfg, &place)? {
        store.set_meta("mesh", &cfg.master.mesh.to_string()).await?;
    }
    let cluster_id = match loaded.cluster_id {
        Some(id) => id,
        None => {
            let id = crate::persistence::sqlite::new_cluster_id();
            store
                .set_meta("cluster_id", &id)
                .await
                .context("saving the cluster id")?;
            id
        }
    };
    let next_job_id = loaded.jobs.max_id().map_or(1, |m| m + 1);
    let initial = Initial {
        cluster_id: cluster_id.into(),
        persisted: Persisted {
            next_job_id,
            table_version: loaded.table_version,
            table_epoch_ns: loaded
                .table_epoch
                .and_then(|(e, q)| (q == quantum_ns).then_some(e)),
        },
        records: attached(
            loaded.jobs.into_iter(),
            loaded.specs,
            cfg.master.auth.allow_root_jobs,
        ),
        drained: loaded.drained,
    };
    Ok((StateStore::Etcd(store), initial))
}
