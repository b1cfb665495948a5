//! Each rank's messaging directory (`msg_dir/X-Y/JOB.RANK`) and its two pages: the table
//! page, which the agent writes (the clock offset and the rank's next switch-out) and the
//! rank only reads, and the state page, which the rank writes (blocked since, counters,
//! quiesce timings) and the agent reads for the switch thread and the heartbeat.
//!
//! The directory (0700) belongs to the rank's user; the table page stays the agent's
//! (0644). The state page is not a file: it is sealed memory (a memfd that cannot be
//! shrunk or grown) the rank inherits as `GANG_STATE_FD`, so nothing the rank's user can
//! do makes the agent's reads of it fault (a state page file the user could truncate
//! killed the agent with SIGBUS at its next heartbeat).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gang_msg::abi::{StatePage, TablePage, files};
use gang_proto::v1::RankActivity;

use crate::error::Coord;
use crate::ranks::RankKey;
use crate::rt::clock::{Clock, monotonic_ns};
use crate::switch::MsgPages;

/// A batch script's name in its rank's directory.
pub const SCRIPT: &str = "script";

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

/// One rank's directory and pages.
struct RankPages {
    table: Arc<TablePage>,
    state: Arc<StatePage>,
    /// The last blocked-since read (host monotonic) and what it was reported as (master
    /// clock): the same wait must be reported the same at every check, and converting
    /// it anew each time would move it by the clock's jitter.
    since: Mutex<(u64, i64)>,
}

/// The ranks' directories and pages on this node.
pub struct Pages {
    base: PathBuf,
    node_dir: PathBuf,
    clock: Arc<Clock>,
    ranks: Mutex<HashMap<RankKey, RankPages>>,
}

impl Pages {
    pub fn new(base: PathBuf, node: Coord, clock: Arc<Clock>) -> Pages {
        Pages {
            node_dir: base.join(format!("{}-{}", node.x, node.y)),
            base,
            clock,
            ranks: Mutex::new(HashMap::new()),
        }
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// This node's directory under the base (the PMIx server keeps its files there too).
    pub fn node_dir(&self) -> &Path {
        &self.node_dir
    }

    fn rank_dir(&self, key: RankKey) -> PathBuf {
        self.node_dir.join(format!("{}.{}", key.job_id, key.rank))
    }

    /// Make the rank's directory and pages, owned by `uid` (the rank's user and group;
    /// None: the agent's). Returns the directory and the state page's descriptor, for
    /// the rank to inherit.
    pub fn create(
        &self,
        key: RankKey,
        uid: Option<(u32, u32)>,
        script: Option<&str>,
    ) -> std::io::Result<(PathBuf, OwnedFd)> {
        if !self.node_dir.is_dir() {
            // Traversable by every user (a umask such as systemd's 0077 would not make
            // it so), listable by none: each rank knows its own path.
            for d in [&self.base, &self.node_dir] {
                if !d.is_dir() {
                    std::fs::create_dir_all(d)?;
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
                }
            }
        }
        let dir = self.rank_dir(key);
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
        let (state, state_fd) = StatePage::create_sealed()?;
        // The batch script, for its user alone: made before the directory is theirs, so
        // nothing of theirs can be in its place.
        if let Some(text) = script {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let path = dir.join(SCRIPT);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o500)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)?;
            f.write_all(text.as_bytes())?;
            if let Some((uid, gid)) = uid {
                chown(&path, Some(uid), Some(gid))?;
            }
        }
        if let Some((uid, gid)) = uid {
            chown(&dir, Some(uid), Some(gid))?;
        }
        self.ranks.lock().unwrap().insert(
            key,
            RankPages {
                table: Arc::new(table),
                state: Arc::new(state),
                since: Mutex::new((0, 0)),
            },
        );
        Ok((dir, state_fd))
    }

    /// The rank is gone: its directory too, whatever of it was made.
    pub fn remove(&self, key: RankKey) {
        self.ranks.lock().unwrap().remove(&key);
        let _ = std::fs::remove_dir_all(self.rank_dir(key));
    }

    /// A rank's pages, for the switch thread.
    pub fn get(&self, key: RankKey) -> Option<MsgPages> {
        self.ranks.lock().unwrap().get(&key).map(|r| MsgPages {
            table: Arc::clone(&r.table),
            state: Arc::clone(&r.state),
        })
    }

    /// What every rank whose state page is initialised is doing, for the heartbeat.
    /// Blocked-since times go on the master clock.
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

    /// At the agent's end: the node's directory once its ranks' are gone, and the base if
    /// that leaves it empty (never anything else of the base).
    pub fn remove_node_dir(&self) {
        let _ = std::fs::remove_dir(&self.node_dir);
        let _ = std::fs::remove_dir(&self.base);
    }
}
