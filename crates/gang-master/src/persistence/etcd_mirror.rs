//! The master's state as the keys under its etcd prefix say it (layout in `persistence/etcd.rs`),
//! decoded: what a newly elected leader starts from. Built by one full read, or kept
//! current by applying each change as it is committed (a standby's warm copy,
//! `warm_copy.rs`), so that taking over decodes nothing.
//!
//! Pure: keys and values in, state out; reading etcd is the caller's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::Context;

use crate::job::{SavedJob, Spec};

/// What a master finds in the store when it becomes the leader.
#[derive(Debug, Default)]
pub struct Loaded {
    pub mesh: Option<String>,
    pub cluster_id: Option<String>,
    pub table_version: u64,
    /// (epoch, quantum) of the last run's slot grid.
    pub table_epoch: Option<(i64, i64)>,
    /// Every job, by id (taken one at a time: see [`Jobs`]).
    pub jobs: Jobs,
    pub drained: Vec<(u32, u32)>,
    /// The specs arrays' tasks share, by array id.
    pub specs: HashMap<u64, Arc<Spec>>,
    /// Ended jobs whose rows are still in keys of their own (not yet archived).
    pub finished_unarchived: BTreeSet<u64>,
    /// Taken from a standby's warm copy (not read at the election).
    pub from_warm_copy: bool,
}

/// The decoded keys under one prefix, as of `revision`.
#[derive(Debug)]
pub struct Mirror {
    /// The prefix with its trailing `/`.
    prefix: String,
    /// Every change up to this revision is in.
    pub revision: i64,
    meta: BTreeMap<String, String>,
    /// Archive keys' jobs, by the archive's first id.
    archives: BTreeMap<u64, Vec<SavedJob>>,
    /// Jobs in keys of their own.
    jobs: BTreeMap<u64, SavedJob>,
    drained: BTreeSet<(u32, u32)>,
    /// The specs arrays' tasks share.
    specs: HashMap<u64, Arc<Spec>>,
}

fn id_of(name: &str) -> Option<u64> {
    name.parse().ok()
}

impl Mirror {
    /// Nothing yet, at `revision`; `prefix` as in the master's target (no trailing `/`).
    pub fn new(prefix: &str, revision: i64) -> Mirror {
        Mirror {
            prefix: format!("{prefix}/"),
            revision,
            meta: BTreeMap::new(),
            archives: BTreeMap::new(),
            jobs: BTreeMap::new(),
            specs: HashMap::new(),
            drained: BTreeSet::new(),
        }
    }

    /// Apply one key's new value (`None`: deleted) made at `revision`. Keys this master
    /// does not keep (the leader key, others' keys) are passed over; a value it cannot
    /// read is an error naming the key.
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>, revision: i64) -> anyhow::Result<()> {
        self.revision = self.revision.max(revision);
        let Some(rest) = std::str::from_utf8(key)
            .ok()
            .and_then(|k| k.strip_prefix(&self.prefix))
        else {
            return Ok(());
        };
        let Some((kind, name)) = rest.split_once('/') else {
            return Ok(());
        };
        let what = || format!("{kind} {name} in etcd");
        match (kind, value) {
            ("meta", Some(v)) => {
                self.meta
                    .insert(name.into(), String::from_utf8_lossy(v).into_owned());
            }
            ("meta", None) => {
                self.meta.remove(name);
            }
            ("jobs", v) => {
                let id = id_of(name).with_context(what)?;
                match v {
                    Some(v) => {
                        let job: SavedJob = serde_json::from_slice(v).with_context(what)?;
                        self.jobs.insert(id, job);
                    }
                    None => {
                        self.jobs.remove(&id);
                    }
                }
            }
            ("archive", v) => {
                let first = id_of(name).with_context(what)?;
                match v {
                    Some(v) => {
                        let jobs =
                            crate::persistence::etcd_archive::unpack(v).with_context(what)?;
                        self.archives.insert(first, jobs);
                    }
                    None => {
                        self.archives.remove(&first);
                    }
                }
            }
            ("specs", v) => {
                let id = id_of(name).with_context(what)?;
                match v {
                    Some(v) => {
                        let spec: Spec = serde_json::from_slice(v).with_context(what)?;
                        self.specs.insert(id, Arc::new(spec));
                    }
                    None => {
                        self.specs.remove(&id);
                    }
                }
            }
            ("drained", v) => {
                let node = name
                    .split_once(',')
                    .and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
                    .with_context(what)?;
                if v.is_some() {
                    self.drained.insert(node);
                } else {
                    self.drained.remove(&node);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The state, every job once, by id: a row in a key of its own wins over an archived
    /// one (a job saved again after it was archived).
    pub fn into_loaded(self) -> Loaded {
        let meta = |k: &str| self.meta.get(k).cloned();
        Loaded {
            mesh: meta("mesh"),
            cluster_id: meta("cluster_id"),
            table_version: meta("table_version")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            table_epoch: meta("table_epoch").and_then(|v| {
                let (e, q) = v.split_once(':')?;
                Some((e.parse().ok()?, q.parse().ok()?))
            }),
            drained: self.drained.into_iter().collect(),
            finished_unarchived: self
                .jobs
                .values()
                .filter(|j| j.state().is_final())
                .map(|j| j.id.0)
                .collect(),
            jobs: Jobs {
                archives: self.archives,
                own: self.jobs,
            },
            specs: self.specs,
            from_warm_copy: false,
        }
    }
}

/// Every job of the state, archived or in a key of its own, in id order, each once (the
/// own key's row wins). Handed to recovery one at a time: a million jobs copied into one
/// more vector were a third of a takeover.
#[derive(Debug, Default)]
pub struct Jobs {
    archives: BTreeMap<u64, Vec<SavedJob>>,
    own: BTreeMap<u64, SavedJob>,
}

/// `archived` and `own`, both in id order, merged; of two with one id, `own`'s.
fn merge<T>(
    archived: impl Iterator<Item = T>,
    own: impl Iterator<Item = T>,
    id: impl Fn(&T) -> u64,
) -> impl Iterator<Item = T> {
    let mut archived = archived.peekable();
    let mut own = own.peekable();
    std::iter::from_fn(move || match (archived.peek(), own.peek()) {
        (Some(a), Some(o)) if id(a) < id(o) => archived.next(),
        (Some(a), Some(o)) if id(a) == id(o) => {
            archived.next();
            own.next()
        }
        (_, Some(_)) => own.next(),
        (Some(_), None) => archived.next(),
        (None, None) => None,
    })
}

impl Jobs {
    /// Whether each archive's jobs come before the next archive's (always, as this master
    /// writes them): then a merge gives id order.
    fn in_order(&self) -> bool {
        let mut last = None;
        self.archives.values().flatten().all(|j| {
            let ok = last.is_none_or(|l| l < j.id.0);
            last = Some(j.id.0);
            ok
        })
    }

    /// In id order, by reference.
    pub fn iter(&self) -> Box<dyn Iterator<Item = &SavedJob> + '_> {
        if self.in_order() {
            return Box::new(merge(
                self.archives.values().flatten(),
                self.own.values(),
                |j| j.id.0,
            ));
        }
        let mut all: BTreeMap<u64, &SavedJob> = BTreeMap::new();
        all.extend(self.archives.values().flatten().map(|j| (j.id.0, j)));
        all.extend(self.own.values().map(|j| (j.id.0, j)));
        Box::new(all.into_values())
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.archives.values().all(Vec::is_empty) && self.own.is_empty()
    }

    /// The highest id, if any.
    pub fn max_id(&self) -> Option<u64> {
        let archived = self.archives.values().flatten().map(|j| j.id.0).max();
        archived.max(self.own.keys().next_back().copied())
    }

    /// Into one vector (for tests and tools: recovery takes them one at a time).
    pub fn into_vec(self) -> Vec<SavedJob> {
        self.into_iter().collect()
    }
}

impl IntoIterator for Jobs {
    type Item = SavedJob;
    type IntoIter = Box<dyn Iterator<Item = SavedJob> + Send>;

    fn into_iter(self) -> Self::IntoIter {
        if self.in_order() {
            return Box::new(merge(
                self.archives.into_values().flatten(),
                self.own.into_values(),
                |j| j.id.0,
            ));
        }
        let mut all = BTreeMap::new();
        all.extend(self.archives.into_values().flatten().map(|j| (j.id.0, j)));
        all.extend(self.own.into_values().map(|j| (j.id.0, j)));
        Box::new(all.into_values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, state: &str) -> Vec<u8> {
        format!(
            r#"{{"id":{id},"user":"u","uid":1,"gid":1,"groups":[1],"name":"x","argv":["x"],"cwd":"/","env":{{}},"time_limit_s":0,"stdin":false,"shape":"1x1","w":1,"h":1,"state":"{state}","exit_code":0,"reason":"","submit_ns":1,"start_ns":2,"end_ns":3,"gang":"stop","on_deadlock":"report","msg_context":"resident","mpi":"pmi1","mpi_check":false,"run_ns":0}}"#
        )
        .into_bytes()
    }

    /// An array's spec key is kept with the jobs, and a task's row names it.
    #[test]
    fn an_arrays_spec_is_followed_with_its_tasks() {
        let mut m = Mirror::new("/c", 1);
        let spec = serde_json::to_vec(&*row_spec()).unwrap();
        m.apply(b"/c/specs/00000000000000000004", Some(&spec), 2)
            .unwrap();
        let task = String::from_utf8(row(4, "queued"))
            .unwrap()
            .replace(r#""run_ns":0}"#, r#""run_ns":0,"spec_of":4}"#);
        m.apply(b"/c/jobs/00000000000000000004", Some(task.as_bytes()), 3)
            .unwrap();
        let loaded = m.into_loaded();
        assert_eq!(loaded.specs[&4].argv, ["./big", "input"]);
        let mut jobs: Vec<SavedJob> = loaded.jobs.into_iter().collect();
        crate::job::read_back::attach_spec(&mut jobs[0], &loaded.specs);
        assert_eq!(jobs[0].argv, ["./big", "input"]);
    }

    fn row_spec() -> Arc<Spec> {
        let mut j: SavedJob = serde_json::from_slice(&row(1, "queued")).unwrap();
        Arc::make_mut(&mut j.record.spec).argv = vec!["./big".into(), "input".into()];
        j.record.spec
    }

    #[test]
    fn changes_applied_in_order_give_the_state_a_full_read_gives() {
        let mut m = Mirror::new("/c", 1);
        m.apply(b"/c/meta/mesh", Some(b"4x4"), 2).unwrap();
        m.apply(b"/c/meta/table_epoch", Some(b"100:50"), 2).unwrap();
        for id in 1..=3 {
            m.apply(
                format!("/c/jobs/{id:020}").as_bytes(),
                Some(&row(id, "completed")),
                3,
            )
            .unwrap();
        }
        m.apply(b"/c/jobs/00000000000000000004", Some(&row(4, "queued")), 4)
            .unwrap();
        // Jobs 1-2 archived: one key made, their own keys deleted, in one revision.
        let packed =
            crate::persistence::etcd_archive::pack(&[row(1, "completed"), row(2, "completed")])
                .unwrap();
        m.apply(b"/c/archive/00000000000000000001", Some(&packed), 5)
            .unwrap();
        m.apply(b"/c/jobs/00000000000000000001", None, 5).unwrap();
        m.apply(b"/c/jobs/00000000000000000002", None, 5).unwrap();
        // Job 2 saved again after its archive: its own key wins.
        m.apply(b"/c/jobs/00000000000000000002", Some(&row(2, "failed")), 6)
            .unwrap();
        m.apply(b"/c/drained/1,2", Some(b""), 7).unwrap();
        m.apply(b"/c/drained/3,0", Some(b""), 7).unwrap();
        m.apply(b"/c/drained/1,2", None, 8).unwrap();
        m.apply(b"/c/leader", Some(b"clients=..."), 9).unwrap();
        m.apply(b"/other/jobs/00000000000000000009", Some(b"not json"), 9)
            .unwrap();
        assert_eq!(m.revision, 9);
        let l = m.into_loaded();
        assert_eq!(l.mesh.as_deref(), Some("4x4"));
        assert_eq!(l.table_epoch, Some((100, 50)));
        let ids: Vec<(u64, String)> = l
            .jobs
            .into_vec()
            .iter()
            .map(|j| (j.id.0, format!("{:?}", j.state())))
            .collect();
        assert_eq!(
            ids,
            vec![
                (1, "Completed".into()),
                (2, "Failed".into()),
                (3, "Completed".into()),
                (4, "Queued".into())
            ]
        );
        assert_eq!(l.finished_unarchived, [2, 3].into_iter().collect());
        assert_eq!(l.drained, vec![(3, 0)]);
    }

    #[test]
    fn archives_out_of_order_still_give_every_job_once_by_id() {
        let mut m = Mirror::new("/c", 1);
        let pack = |ids: &[u64]| {
            let rows: Vec<Vec<u8>> = ids.iter().map(|&i| row(i, "completed")).collect();
            crate::persistence::etcd_archive::pack(&rows).unwrap()
        };
        // Overlapping archives (never written by this master) and an own row among them.
        m.apply(
            b"/c/archive/00000000000000000001",
            Some(&pack(&[1, 5, 9])),
            2,
        )
        .unwrap();
        m.apply(b"/c/archive/00000000000000000002", Some(&pack(&[2, 3])), 3)
            .unwrap();
        m.apply(b"/c/jobs/00000000000000000003", Some(&row(3, "failed")), 4)
            .unwrap();
        let l = m.into_loaded();
        assert_eq!(l.jobs.max_id(), Some(9));
        let by_ref: Vec<u64> = l.jobs.iter().map(|j| j.id.0).collect();
        let jobs = l.jobs.into_vec();
        let ids: Vec<u64> = jobs.iter().map(|j| j.id.0).collect();
        assert_eq!(ids, [1, 2, 3, 5, 9]);
        assert_eq!(by_ref, ids);
        assert_eq!(format!("{:?}", jobs[2].state()), "Failed");
    }

    #[test]
    fn a_value_it_cannot_read_is_an_error_naming_the_key() {
        let mut m = Mirror::new("/c", 1);
        let e = m
            .apply(b"/c/jobs/00000000000000000007", Some(b"{"), 2)
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("jobs 00000000000000000007"),
            "{e:#}"
        );
        let e = m.apply(b"/c/drained/x", Some(b""), 2).unwrap_err();
        assert!(format!("{e:#}").contains("drained x"), "{e:#}");
    }
}
