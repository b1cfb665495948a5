//! The master's state as the keys under its etcd prefix say it (layout in `store_etcd.rs`),
//! decoded: what a newly elected leader starts from. Built by one full read, or kept
//! current by applying each change as it is committed (a standby's warm copy,
//! `warm_copy.rs`), so that taking over decodes nothing.
//!
//! Pure: keys and values in, state out; reading etcd is the caller's.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;

use crate::job::SavedJob;

/// What a master finds in the store when it becomes the leader.
#[derive(Debug, Default)]
pub struct Loaded {
    pub mesh: Option<String>,
    pub cluster_id: Option<String>,
    pub table_version: u64,
    /// (epoch, quantum) of the last run's slot grid.
    pub table_epoch: Option<(i64, i64)>,
    /// Every job, by id.
    pub jobs: Vec<SavedJob>,
    pub drained: Vec<(u32, u32)>,
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
                        let jobs = crate::etcd_archive::unpack(v).with_context(what)?;
                        self.archives.insert(first, jobs);
                    }
                    None => {
                        self.archives.remove(&first);
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
        let mut out = Loaded {
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
                .filter(|j| j.state.is_final())
                .map(|j| j.id.0)
                .collect(),
            jobs: Vec::new(),
            from_warm_copy: false,
        };
        // Both in id order (an archive holds consecutive ids, its key the first): merged in
        // one pass, each job moved once (a million large rows to take over).
        let archived: usize = self.archives.values().map(Vec::len).sum();
        out.jobs.reserve(archived + self.jobs.len());
        let mut own = self.jobs.into_values().peekable();
        for job in self.archives.into_values().flatten() {
            while let Some(o) = own.next_if(|o| o.id.0 < job.id.0) {
                out.jobs.push(o);
            }
            // A row in a key of its own wins over the archived one.
            match own.next_if(|o| o.id == job.id) {
                Some(o) => out.jobs.push(o),
                None => out.jobs.push(job),
            }
        }
        out.jobs.extend(own);
        // Archives written out of order (never by this master) would break the merge.
        if !out.jobs.is_sorted_by_key(|j| j.id.0) {
            out.jobs.sort_by_key(|j| j.id.0);
            out.jobs.dedup_by_key(|j| j.id.0);
        }
        out
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
            crate::etcd_archive::pack(&[row(1, "completed"), row(2, "completed")]).unwrap();
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
            .iter()
            .map(|j| (j.id.0, format!("{:?}", j.state)))
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
