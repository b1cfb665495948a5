//! Durable state in SQLite (WAL): jobs and drained nodes. A job row is committed before
//! the submitter hears it was accepted; a restarted master reloads every row.
//!
//! Writes are grouped: a round's saves ([`Save`]) go into one transaction, committed before
//! any of its commands is answered, so many submissions share one fsync ([`Commit`], called
//! by `state::round::run`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use std::sync::Arc;

use crate::job::{SavedJob, Spec};
use crate::state::effects::Save;
use crate::state::round::Commit;

pub struct Store {
    conn: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS drained (
    x INTEGER NOT NULL,
    y INTEGER NOT NULL,
    PRIMARY KEY (x, y)
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS specs (
    array INTEGER PRIMARY KEY,
    spec TEXT NOT NULL
);
";

/// The database holds every job's command line, environment and working directory:
/// users' data, readable by the master alone (like the output logs), whatever the mode of
/// the directory it is in. A new file is made 0600; an existing one, and its WAL files, are
/// made so (SQLite gives the WAL files it creates the database's mode).
fn private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = PathBuf::from(path).into_os_string();
        p.push(suffix);
        match std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Random bytes from the kernel (a time-based fallback where /dev/urandom is missing).
fn getrandom_bytes(out: &mut [u8]) {
    use std::io::Read;
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(out))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id());
        for (i, b) in out.iter_mut().enumerate() {
            *b = (t >> (8 * (i % 8))) as u8;
        }
    }
}

/// A new cluster's id: 8 hex digits, random.
pub fn new_cluster_id() -> String {
    let mut bytes = [0u8; 4];
    getrandom_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        private(path).with_context(|| format!("state database {}", path.display()))?;
        let conn = Connection::open(path)?;
        // WAL with synchronous=FULL: a committed transaction survives a crash or power loss.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Store { conn })
    }

    /// The mesh the database was created for (None for a new database).
    pub fn mesh(&self) -> rusqlite::Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = 'mesh'", [], |r| {
                r.get(0)
            })
            .optional()
    }

    pub fn set_mesh(&self, mesh: &str) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('mesh', ?1)",
            [mesh],
        )?;
        Ok(())
    }

    /// This database's cluster id: made once, at the first open, and kept (jobs' MPI
    /// namespaces are named after it, `LaunchRequest.namespace`).
    pub fn cluster_id(&self) -> rusqlite::Result<String> {
        let get = || {
            self.conn
                .query_row("SELECT value FROM meta WHERE key = 'cluster_id'", [], |r| {
                    r.get::<_, String>(0)
                })
                .optional()
        };
        if let Some(id) = get()? {
            return Ok(id);
        }
        let id = new_cluster_id();
        self.conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('cluster_id', ?1)",
            [&id],
        )?;
        Ok(get()?.unwrap_or(id))
    }

    /// The last slice table version published (0 for a new database). Agents keep the
    /// newest version they were given, so versions must grow across restarts.
    pub fn table_version(&self) -> rusqlite::Result<u64> {
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'table_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// The slot grid's origin of the last run, if it used `quantum_ns`.
    pub fn table_epoch(&self, quantum_ns: i64) -> rusqlite::Result<Option<i64>> {
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'table_epoch'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(v.and_then(|v| {
            let (e, q) = v.split_once(':')?;
            (q.parse::<i64>().ok()? == quantum_ns).then(|| e.parse().ok())?
        }))
    }

    pub fn next_job_id(&self) -> rusqlite::Result<u64> {
        let max: Option<i64> = self
            .conn
            .query_row("SELECT MAX(id) FROM jobs", [], |r| r.get(0))?;
        Ok(max.map_or(1, |m| m as u64 + 1))
    }

    pub fn load_jobs(&self) -> anyhow::Result<Vec<SavedJob>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, record FROM jobs ORDER BY id")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = vec![];
        for row in rows {
            let (id, text) = row?;
            let rec: SavedJob = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("job {id} in the state database: {e}"))?;
            out.push(rec);
        }
        Ok(out)
    }

    /// The specs arrays' tasks share, by array id.
    pub fn load_specs(&self) -> anyhow::Result<std::collections::HashMap<u64, Arc<Spec>>> {
        let mut stmt = self.conn.prepare("SELECT array, spec FROM specs")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = std::collections::HashMap::new();
        for row in rows {
            let (id, text) = row?;
            let spec: Spec = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("the spec of array {id} in the state database: {e}")
            })?;
            out.insert(id as u64, Arc::new(spec));
        }
        Ok(out)
    }

    pub fn drained(&self) -> rusqlite::Result<Vec<(u32, u32)>> {
        let mut stmt = self.conn.prepare("SELECT x, y FROM drained")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }
}

impl Commit for Store {
    fn commit<'a>(&mut self, saves: impl Iterator<Item = &'a Save>) -> Result<(), String> {
        // IMMEDIATE: the write lock at once (a deferred transaction that has to upgrade may
        // fail with SQLITE_BUSY without waiting). Dropped uncommitted, or after a failed
        // commit, the transaction rolls back: nothing of the round stays.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| e.to_string())?;
        for save in saves {
            write(&tx, save).map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }
}

fn write(db: &Connection, save: &Save) -> rusqlite::Result<()> {
    let meta = "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)";
    match save {
        Save::Job(job) => {
            let text = serde_json::to_string(job).expect("job records serialize");
            db.execute(
                "INSERT INTO jobs (id, record) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET record = excluded.record",
                params![job.id.0 as i64, text],
            )?;
        }
        Save::Spec { array, spec } => {
            let text = serde_json::to_string(spec.as_ref()).expect("specs serialize");
            db.execute(
                "INSERT OR REPLACE INTO specs (array, spec) VALUES (?1, ?2)",
                params![array.0 as i64, text],
            )?;
        }
        Save::Drained {
            node: (x, y),
            drained: true,
        } => {
            db.execute(
                "INSERT OR IGNORE INTO drained (x, y) VALUES (?1, ?2)",
                params![x, y],
            )?;
        }
        Save::Drained {
            node: (x, y),
            drained: false,
        } => {
            db.execute("DELETE FROM drained WHERE x = ?1 AND y = ?2", params![x, y])?;
        }
        Save::TableMeta { version, grid } => {
            db.execute(meta, ["table_version", &version.to_string()])?;
            let epoch = format!("{}:{}", grid.epoch_ns, grid.quantum_ns);
            db.execute(meta, ["table_epoch", &epoch])?;
        }
    }
    Ok(())
}

// SQLite's errors reach callers as the domain's store error: here, on the daemon's side,
// so that `crate::error` (which the pure state uses) knows no database.
impl From<rusqlite::Error> for crate::error::MasterError {
    fn from(e: rusqlite::Error) -> Self {
        crate::error::MasterError::Store(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_database_and_its_wal_files_are_the_masters_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let files = ["s.db", "s.db-wal", "s.db-shm"].map(|f| dir.path().join(f));
        {
            let store = Store::open(&db).unwrap();
            store.set_mesh("2x2").unwrap();
            for f in &files {
                assert_eq!(mode(f), 0o600, "{}", f.display());
            }
        }
        // A database an older master left readable to all is closed up at the next start.
        for f in &files {
            if f.exists() {
                std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let store = Store::open(&db).unwrap();
        assert_eq!(store.mesh().unwrap().as_deref(), Some("2x2"));
        for f in files.iter().filter(|f| f.exists()) {
            assert_eq!(mode(f), 0o600, "{}", f.display());
        }
    }

    #[test]
    fn a_database_keeps_its_cluster_id_and_another_gets_another() {
        let dir = tempfile::tempdir().unwrap();
        let id = Store::open(&dir.path().join("a.db"))
            .unwrap()
            .cluster_id()
            .unwrap();
        assert_eq!(id.len(), 8, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        let again = Store::open(&dir.path().join("a.db"))
            .unwrap()
            .cluster_id()
            .unwrap();
        assert_eq!(id, again);
        let other = Store::open(&dir.path().join("b.db"))
            .unwrap()
            .cluster_id()
            .unwrap();
        assert_ne!(id, other);
    }

    /// Rows as masters wrote them: one flat JSON object a job, with its live part while it
    /// is placed; the last from an older master still, without the fields added since.
    const EARLIER_ROWS: [&str; 4] = [
        r#"{"id":1,"user":"u1001","uid":1001,"gid":1001,"groups":[1001],"name":"./a.out","argv":["./a.out"],"cwd":"/tmp","env":{"GANG_MASTER":"x"},"time_limit_s":30,"stdin":false,"shape":"1x1","w":1,"h":1,"state":"completed","submesh":{"x":0,"y":0,"w":1,"h":1},"exit_code":0,"reason":"","submit_ns":1700000000000000000,"start_ns":1700000000000000000,"end_ns":1700000000000000000,"gang":"priority","on_deadlock":"report","msg_context":"resident","mpi":"pmi1","mpi_check":false,"run_ns":0,"client_token":"tok","output_files":{"output":"out-%j.txt"}}"#,
        r#"{"id":2,"user":"u1000","uid":1000,"gid":1000,"groups":[1000],"name":"./a.out","argv":["./a.out"],"cwd":"/tmp","env":{"GANG_MASTER":"x"},"time_limit_s":0,"stdin":false,"shape":"2x2","w":2,"h":2,"state":"running","submesh":{"x":0,"y":0,"w":2,"h":2},"exit_code":null,"reason":"","submit_ns":1700000000000000000,"start_ns":1700000000000000000,"end_ns":0,"gang":"stop","on_deadlock":"report","msg_context":"resident","mpi":"pmi1","mpi_check":false,"run_ns":0,"live":{"exits":[null,0,null,null],"failure":null,"cancelled":null,"timed_out":false,"home_slice":1}}"#,
        r#"{"id":3,"user":"u1000","uid":1000,"gid":1000,"groups":[1000],"name":"./a.out","argv":["./a.out"],"cwd":"/tmp","env":{"GANG_MASTER":"x"},"time_limit_s":0,"stdin":false,"shape":"4x4","w":4,"h":4,"state":"queued","submesh":null,"exit_code":null,"reason":"","submit_ns":1700000000000000000,"start_ns":0,"end_ns":0,"gang":"stop","on_deadlock":"report","msg_context":"resident","mpi":"pmi1","mpi_check":false,"run_ns":0}"#,
        r#"{"id":4,"user":"bob","uid":1002,"gid":1002,"name":"sim","argv":["sim"],"cwd":"/","env":{},"time_limit_s":0,"stdin":true,"shape":"2","w":2,"h":1,"state":"cancelled","submesh":null,"exit_code":null,"reason":"cancelled by bob","submit_ns":1,"start_ns":0,"end_ns":2}"#,
    ];

    /// An array of a large command and environment is one copy in the database: its
    /// tasks' rows name the spec saved once, and read back with it.
    #[test]
    fn an_arrays_tasks_share_one_saved_spec_and_read_back_whole() {
        use crate::state::testkit::{config, new_job};
        use crate::state::{MasterState, Now, Persisted, reactor, round};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut store = Store::open(&path).unwrap();
        let mut st = MasterState::new(config(2, 2, 1), &Persisted::default()).unwrap();
        let mut job = new_job("1x1", 1000, 0);
        job.argv = vec!["./solver".into(), "x".repeat(200_000)];
        job.env.insert("BIG".into(), "y".repeat(800_000));
        job.at_submit.array = Some(gang_core::schedule::array::parse("0-99", 1000).unwrap());
        job.at_submit.hold = true;
        let now = Now {
            mono_ns: 1,
            wall_ns: 1,
            live_ns: 1,
        };
        let (r, _) = round::run(&mut st, &mut store, now, |st, fx, now| {
            reactor::on_recover(st, fx, now, std::iter::empty(), &[])
        });
        r.unwrap();
        let (r, saved) = round::run(&mut st, &mut store, now, |st, fx, now| {
            reactor::on_submit(st, fx, now, job)
        });
        r.unwrap();
        saved.unwrap();
        let rows: i64 = store
            .conn
            .query_row("SELECT SUM(LENGTH(record)) FROM jobs", [], |r| r.get(0))
            .unwrap();
        assert!(rows < 100 * 2000, "100 task rows of {rows} bytes");
        let specs = store.load_specs().unwrap();
        assert_eq!(specs.len(), 1);
        let mut jobs = store.load_jobs().unwrap();
        assert_eq!(jobs.len(), 100);
        for j in &mut jobs {
            crate::job::read_back::attach_spec(j, &specs);
            assert_eq!(j.argv[1].len(), 200_000);
            assert_eq!(j.env["BIG"].len(), 800_000);
        }
        // A task row whose spec is gone is not run with the placeholder.
        let mut orphan = jobs[5].clone();
        orphan.spec_of = Some(gang_core::JobId(77));
        crate::job::read_back::attach_spec(&mut orphan, &Default::default());
        assert_eq!(orphan.state(), crate::job::State::Failed);
        assert!(
            orphan.reason.contains("spec of array 77 is missing"),
            "{}",
            orphan.reason
        );
    }

    #[test]
    fn rows_of_an_earlier_master_load_and_are_saved_back_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        for (i, row) in EARLIER_ROWS.iter().enumerate() {
            store
                .conn
                .execute(
                    "INSERT INTO jobs (id, record) VALUES (?1, ?2)",
                    params![i as i64 + 1, row],
                )
                .unwrap();
        }
        let jobs = store.load_jobs().unwrap();
        assert_eq!(jobs.len(), 4);
        let (done, running, oldest) = (&jobs[0], &jobs[1], &jobs[3]);
        assert_eq!(done.client_token.as_deref(), Some("tok"));
        assert_eq!(done.output_files.output, "out-%j.txt");
        assert_eq!(done.gang, gang_core::GangMode::Priority);
        assert_eq!(
            (done.owner.uid, done.owner.groups.as_slice()),
            (1001, &[1001][..])
        );
        let live = running.live.as_ref().expect("a running job's live part");
        assert_eq!(
            (live.exits.as_slice(), live.home_slice),
            (&[None, Some(0), None, None][..], Some(1))
        );
        assert_eq!(jobs[2].state(), crate::job::State::Queued);
        // An older row takes the defaults of the fields it lacks.
        assert!(oldest.owner.groups.is_empty() && oldest.run_ns == 0 && oldest.stdin);
        // Not the cluster's default of today: such a job ran with PMI-1.
        assert_eq!(oldest.mpi, crate::job::Mpi::Pmi1);

        let saves: Vec<Save> = jobs.into_iter().map(|j| Save::Job(Box::new(j))).collect();
        store.commit(saves.iter()).unwrap();
        for (i, row) in EARLIER_ROWS.iter().enumerate().take(3) {
            let text: String = store
                .conn
                .query_row(
                    "SELECT record FROM jobs WHERE id = ?1",
                    [i as i64 + 1],
                    |r| r.get(0),
                )
                .unwrap();
            let (now, then): (serde_json::Value, serde_json::Value) = (
                serde_json::from_str(&text).unwrap(),
                serde_json::from_str(row).unwrap(),
            );
            assert_eq!(now, then, "job {}", i + 1);
        }
    }
}
