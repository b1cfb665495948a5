//! The slice matrix (Ousterhout matrix): rows are slices, each a virtual copy of the mesh.
//!
//! Every running job has exactly one *home* slot (a single task, in AP/Linux terms) where
//! it was placed, and may hold *extra* slots in other slices where the same nodes happen
//! to be free (a multiple task). Extra slots are opportunistic: a job placed normally
//! takes its nodes from them, and they never keep a slice alive. Each slice keeps two
//! bitmaps: `home` (home placements only, what a new job is placed against) and `all`
//! (every placement, what an extra slot or a backfilled job must avoid).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::mesh::occupancy::Occupancy;
use crate::mesh::{Mesh, Shape, Submesh};
use crate::place::Placer;
use crate::plan::{Decision, JobId, SliceId};

/// Which slice a job goes into when it fits in several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SliceChoice {
    /// The first in round-robin order (AP/Linux).
    #[default]
    First,
    /// The one with the most busy nodes.
    Densest,
}

impl std::str::FromStr for SliceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "first" => Ok(SliceChoice::First),
            "densest" => Ok(SliceChoice::Densest),
            _ => Err(format!(
                "unknown slice choice {s:?}: expected first or densest"
            )),
        }
    }
}

impl std::fmt::Display for SliceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SliceChoice::First => "first",
            SliceChoice::Densest => "densest",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Home,
    Extra,
}

#[derive(Debug, Clone)]
pub struct Slice {
    pub id: SliceId,
    home: Occupancy,
    all: Occupancy,
    /// Placements in the order they were made.
    jobs: Vec<(JobId, Role)>,
}

impl Slice {
    pub fn jobs(&self) -> &[(JobId, Role)] {
        &self.jobs
    }

    pub fn home_occupancy(&self) -> &Occupancy {
        &self.home
    }

    pub fn occupancy(&self) -> &Occupancy {
        &self.all
    }

    fn has_home_job(&self) -> bool {
        self.jobs.iter().any(|&(_, r)| r == Role::Home)
    }
}

/// Where a running job is.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub submesh: Submesh,
    pub home: SliceId,
    pub extra: Vec<SliceId>,
}

impl Placement {
    /// Number of slots the job runs in (home plus extras).
    pub fn slots(&self) -> usize {
        1 + self.extra.len()
    }
}

#[derive(Debug, Clone)]
pub struct SliceMatrix {
    mesh: Mesh,
    slices: Vec<Slice>,
    placements: BTreeMap<JobId, Placement>,
    next_slice: u32,
    /// Slices that gained free nodes (or were opened) since extra slots were last filled.
    fresh: Vec<SliceId>,
    /// Jobs started since extra slots were last filled.
    started: Vec<JobId>,
    /// Nodes that take no new placement (drained or down), in every slice.
    offline: Occupancy,
}

impl SliceMatrix {
    pub fn new(mesh: Mesh) -> Self {
        SliceMatrix {
            mesh,
            slices: vec![],
            placements: BTreeMap::new(),
            next_slice: 0,
            fresh: vec![],
            started: vec![],
            offline: Occupancy::new(mesh),
        }
    }

    pub fn mesh(&self) -> Mesh {
        self.mesh
    }

    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }

    pub fn placement(&self, job: JobId) -> Option<&Placement> {
        self.placements.get(&job)
    }

    pub fn placements(&self) -> impl Iterator<Item = (JobId, &Placement)> {
        self.placements.iter().map(|(&j, p)| (j, p))
    }

    pub fn running(&self) -> usize {
        self.placements.len()
    }

    fn index(&self, id: SliceId) -> usize {
        self.slices
            .iter()
            .position(|s| s.id == id)
            .unwrap_or_else(|| panic!("slice {id} is not in the matrix"))
    }

    /// What a new job is placed against in slice `s`: its home placements plus the
    /// offline nodes.
    pub fn placeable<'a>(&'a self, s: &'a Slice) -> Cow<'a, Occupancy> {
        if self.offline.busy() == 0 {
            Cow::Borrowed(&s.home)
        } else {
            Cow::Owned(s.home.merged(&self.offline))
        }
    }

    pub fn offline(&self) -> &Occupancy {
        &self.offline
    }

    /// Take node `(x, y)` out of (or back into) service for new placements. Jobs already
    /// on it are not touched. Returns whether anything changed.
    pub fn set_offline(&mut self, x: u32, y: u32, offline: bool) -> bool {
        let node = Submesh::new(x, y, 1, 1);
        assert!(
            node.within(self.mesh),
            "node ({x},{y}) is off the {} mesh",
            self.mesh
        );
        match (offline, self.offline.is_busy(x, y)) {
            (true, false) => self.offline.occupy(node),
            (false, true) => {
                self.offline.release(node);
                // Room may have appeared in every slice.
                self.fresh.extend(self.slices.iter().map(|s| s.id));
            }
            _ => return false,
        }
        true
    }

    /// Where `shape` would go in a new, empty slice (only offline nodes in the way).
    pub fn find_in_new_slice(&self, placer: &dyn Placer, shape: Shape) -> Option<Submesh> {
        placer.find(&self.offline, shape)
    }

    /// A slice with room for `shape`, and where: the first such slice in round-robin
    /// order, or under [`SliceChoice::Densest`] the one with the most busy nodes (ties to
    /// the first), so that sparse slices drain and are eliminated.
    pub fn find(
        &self,
        placer: &dyn Placer,
        shape: Shape,
        choice: SliceChoice,
    ) -> Option<(SliceId, Submesh)> {
        let mut order: Vec<&Slice> = self.slices.iter().collect();
        if choice == SliceChoice::Densest {
            order.retain(|s| s.home.free() >= shape.area());
            order.sort_by_key(|s| std::cmp::Reverse(s.home.busy()));
        }
        order
            .into_iter()
            .find_map(|s| placer.find(&self.placeable(s), shape).map(|sm| (s.id, sm)))
    }

    /// Open an empty slice at the end of the round-robin order.
    pub fn open_slice(&mut self, out: &mut Vec<Decision>) -> SliceId {
        let id = SliceId(self.next_slice);
        self.next_slice += 1;
        self.slices.push(Slice {
            id,
            home: Occupancy::new(self.mesh),
            all: Occupancy::new(self.mesh),
            jobs: vec![],
        });
        self.fresh.push(id);
        out.push(Decision::NewSlice { slice: id });
        id
    }

    /// Start `job` at `submesh` with `slice` as home, evicting extra slots in the way.
    pub fn start(&mut self, job: JobId, slice: SliceId, submesh: Submesh, out: &mut Vec<Decision>) {
        assert!(
            !self.placements.contains_key(&job),
            "job {job} is already running"
        );
        let i = self.index(slice);
        let evicted: Vec<JobId> = self.slices[i]
            .jobs
            .iter()
            .filter(|&&(j, r)| r == Role::Extra && self.placements[&j].submesh.overlaps(submesh))
            .map(|&(j, _)| j)
            .collect();
        for j in evicted {
            self.remove_slot(j, slice, out);
        }
        let s = &mut self.slices[i];
        s.home.occupy(submesh);
        s.all.occupy(submesh);
        s.jobs.push((job, Role::Home));
        self.placements.insert(
            job,
            Placement {
                submesh,
                home: slice,
                extra: vec![],
            },
        );
        self.started.push(job);
        out.push(Decision::Start {
            job,
            slice,
            submesh,
        });
    }

    fn remove_slot(&mut self, job: JobId, slice: SliceId, out: &mut Vec<Decision>) {
        let i = self.index(slice);
        let p = self
            .placements
            .get_mut(&job)
            .expect("extra slot of a running job");
        p.extra.retain(|&s| s != slice);
        let s = &mut self.slices[i];
        s.all.release(p.submesh);
        s.jobs.retain(|&(j, _)| j != job);
        self.fresh.push(slice);
        out.push(Decision::RemoveSlot { job, slice });
    }

    /// Take `job` out of every slot; then drop every slice left without a home job.
    pub fn remove(&mut self, job: JobId, out: &mut Vec<Decision>) -> Option<Placement> {
        let p = self.placements.remove(&job)?;
        for s in self.slices.iter_mut() {
            let before = s.jobs.len();
            s.jobs.retain(|&(j, _)| j != job);
            if s.jobs.len() != before {
                self.fresh.push(s.id);
                s.all.release(p.submesh);
                if s.id == p.home {
                    s.home.release(p.submesh);
                }
            }
        }
        out.push(Decision::Free {
            job,
            submesh: p.submesh,
        });
        self.drop_empty_slices(out);
        Some(p)
    }

    fn drop_empty_slices(&mut self, out: &mut Vec<Decision>) {
        while let Some(i) = self.slices.iter().position(|s| !s.has_home_job()) {
            let id = self.slices[i].id;
            let extras: Vec<JobId> = self.slices[i].jobs.iter().map(|&(j, _)| j).collect();
            for j in extras {
                self.remove_slot(j, id, out);
            }
            self.slices.remove(i);
            out.push(Decision::DropSlice { slice: id });
        }
    }

    /// Whether nodes were freed (or a slice opened) since extra slots were last filled:
    /// until then, a job that found no room still finds none.
    pub fn has_fresh_space(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Give running jobs an extra slot in each slice where their nodes are free. Only
    /// what changed since the last call is searched: every job against slices that gained
    /// free nodes, and newly started jobs against every slice. Jobs are visited in id
    /// order (submission order) so the oldest get first pick.
    pub fn fill_extra_slots(&mut self, out: &mut Vec<Decision>) {
        let mut fresh = std::mem::take(&mut self.fresh);
        let started = std::mem::take(&mut self.started);
        fresh.sort_unstable();
        fresh.dedup();
        let jobs: Vec<(JobId, Submesh)> = self
            .placements
            .iter()
            .map(|(&j, p)| (j, p.submesh))
            .collect();
        for (job, sm) in jobs {
            let everywhere = started.contains(&job);
            for s in self.slices.iter_mut() {
                if !everywhere && fresh.binary_search(&s.id).is_err() {
                    continue;
                }
                if s.all.free() >= sm.area() && s.all.is_free(sm) {
                    s.all.occupy(sm);
                    s.jobs.push((job, Role::Extra));
                    self.placements
                        .get_mut(&job)
                        .expect("running")
                        .extra
                        .push(s.id);
                    out.push(Decision::AddSlot { job, slice: s.id });
                }
            }
        }
    }

    /// Forget pending extra-slot work (when multiple tasks are off).
    pub fn clear_fresh(&mut self) {
        self.fresh.clear();
        self.started.clear();
    }

    /// The matrix's own invariants; `Err` names the first one broken.
    pub fn check(&self) -> Result<(), String> {
        let mut seen_ids = std::collections::BTreeSet::new();
        for s in &self.slices {
            if !seen_ids.insert(s.id) {
                return Err(format!("slice {} appears twice", s.id));
            }
            if !s.has_home_job() {
                return Err(format!(
                    "slice {} has no job of its own and was not eliminated",
                    s.id
                ));
            }
            let mut home = Occupancy::new(self.mesh);
            let mut all = Occupancy::new(self.mesh);
            let mut listed = std::collections::BTreeSet::new();
            for &(j, role) in &s.jobs {
                if !listed.insert(j) {
                    return Err(format!("job {j} holds two slots in slice {}", s.id));
                }
                let p = self
                    .placements
                    .get(&j)
                    .ok_or_else(|| format!("slice {} lists job {j}, which is not running", s.id))?;
                let right_role = match role {
                    Role::Home => p.home == s.id,
                    Role::Extra => p.extra.contains(&s.id),
                };
                if !right_role {
                    return Err(format!(
                        "job {j} is {role:?} in slice {} but its placement disagrees",
                        s.id
                    ));
                }
                if !all.is_free(p.submesh) {
                    return Err(format!(
                        "job {j} at {} overlaps another job in slice {}",
                        p.submesh, s.id
                    ));
                }
                all.occupy(p.submesh);
                if role == Role::Home {
                    home.occupy(p.submesh);
                }
            }
            if home != s.home || all != s.all {
                return Err(format!(
                    "occupancy of slice {} differs from its placements",
                    s.id
                ));
            }
            if s.all.count_busy() != s.all.busy() || s.home.count_busy() != s.home.busy() {
                return Err(format!("busy count of slice {} is stale", s.id));
            }
        }
        for (&j, p) in &self.placements {
            if !p.submesh.within(self.mesh) {
                return Err(format!(
                    "job {j} at {} is off the {} mesh",
                    p.submesh, self.mesh
                ));
            }
            for &sid in std::iter::once(&p.home).chain(&p.extra) {
                let s =
                    self.slices.iter().find(|s| s.id == sid).ok_or_else(|| {
                        format!("job {j} runs in slice {sid}, which does not exist")
                    })?;
                if !s.jobs.iter().any(|&(x, _)| x == j) {
                    return Err(format!(
                        "job {j} claims slice {sid}, which does not list it"
                    ));
                }
            }
        }
        Ok(())
    }
}
