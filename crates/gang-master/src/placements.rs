//! Where each job runs, for the agent calls that are answered without the state task
//! (output batches) or must be checked before they touch anything (exit reports): an
//! agent may speak only for the ranks on its own node.
//!
//! Filled from the job changes the state task announces; a job missing here (announced
//! before this started, lost to a lagging receiver, or evicted after it ended) is asked
//! of the state task once and kept. Bounded: the rectangles of the newest
//! [`KEEP_FINISHED`] ended jobs are kept (an agent may still push a finished job's last
//! output), older ones are asked for again.

use std::collections::{HashMap, VecDeque};
use std::sync::RwLock;

use gang_core::{JobId, Submesh};
use tokio::sync::broadcast;

use crate::actor::{Cmd, Handle};
use crate::error::{MasterError, Result};
use crate::job::Owner;
use crate::state::events::Caller;

/// Ended jobs whose rectangles stay known without asking the state task.
pub const KEEP_FINISHED: usize = 4096;

#[derive(Default)]
struct Known {
    rects: HashMap<u64, Submesh>,
    /// Ended jobs, oldest first.
    finished: VecDeque<u64>,
}

pub struct Placements {
    handle: Handle,
    known: RwLock<Known>,
}

/// Whether rank `rank` of a job placed on `sm` runs on `node` (ranks are numbered
/// row-major from the rectangle's base, as `Job::node_of`).
pub fn runs_on(sm: Submesh, rank: u32, node: (u32, u32)) -> bool {
    rank < sm.w * sm.h && (sm.x + rank % sm.w, sm.y + rank / sm.w) == node
}

impl Placements {
    /// Start following the state task's job changes.
    pub fn start(handle: Handle) -> std::sync::Arc<Placements> {
        let p = std::sync::Arc::new(Placements {
            known: RwLock::new(Known::default()),
            handle: handle.clone(),
        });
        let mut events = handle.events();
        let weak = std::sync::Arc::downgrade(&p);
        tokio::spawn(async move {
            loop {
                let view = match events.recv().await {
                    Ok(v) => v,
                    // Missed changes are asked for when needed.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let Some(p) = weak.upgrade() else { return };
                if let Some(sm) = view.record.submesh {
                    p.note(view.record.id.0, sm, view.record.state().is_final());
                }
            }
        });
        p
    }

    fn note(&self, job: u64, sm: Submesh, ended: bool) {
        let mut k = self.known.write().unwrap_or_else(|e| e.into_inner());
        let new = k.rects.insert(job, sm).is_none();
        if ended && (new || !k.finished.contains(&job)) {
            k.finished.push_back(job);
            while k.finished.len() > KEEP_FINISHED {
                if let Some(old) = k.finished.pop_front() {
                    k.rects.remove(&old);
                }
            }
        }
    }

    /// Where `job` runs (or ran), if it was ever placed.
    async fn rect(&self, job: u64) -> Result<Option<Submesh>> {
        if let Some(sm) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .rects
            .get(&job)
        {
            return Ok(Some(*sm));
        }
        let admin = Caller {
            owner: Owner {
                uid: 0,
                gid: 0,
                groups: vec![],
                user: "root".into(),
            },
            admin: true,
        };
        match self
            .handle
            .call(|tx| Cmd::GetJob(JobId(job), admin, tx))
            .await
        {
            Ok(view) => {
                if let Some(sm) = view.record.submesh {
                    self.note(job, sm, view.record.state().is_final());
                }
                Ok(view.record.submesh)
            }
            Err(MasterError::UnknownJob(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The agent of `node` may speak for each of `ranks` of `job`: they were placed on
    /// that node. Otherwise a refusal naming the first that was not.
    pub async fn check(
        &self,
        node: (u32, u32),
        job: u64,
        ranks: impl IntoIterator<Item = u32>,
    ) -> Result<()> {
        let sm = self.rect(job).await?;
        for rank in ranks {
            if !sm.is_some_and(|sm| runs_on(sm, rank, node)) {
                return Err(MasterError::Forbidden(format!(
                    "node ({},{}) holds no rank {rank} of job {job}",
                    node.0, node.1
                )));
            }
        }
        Ok(())
    }
}

impl Placements {
    /// The agent of `node` holds a rank of `job` (it may pass on its tree's exits).
    pub async fn check_member(&self, node: (u32, u32), job: u64) -> Result<()> {
        let sm = self.rect(job).await?;
        let inside = sm.is_some_and(|sm| {
            node.0 >= sm.x && node.1 >= sm.y && node.0 - sm.x < sm.w && node.1 - sm.y < sm.h
        });
        if inside {
            Ok(())
        } else {
            Err(MasterError::Forbidden(format!(
                "node ({},{}) holds no rank of job {job}",
                node.0, node.1
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_row_major_from_the_base() {
        let sm = Submesh::new(1, 2, 3, 2);
        assert!(runs_on(sm, 0, (1, 2)));
        assert!(runs_on(sm, 2, (3, 2)));
        assert!(runs_on(sm, 3, (1, 3)));
        assert!(!runs_on(sm, 3, (1, 2)));
        assert!(!runs_on(sm, 6, (1, 4)), "past the job's size");
        assert!(!runs_on(sm, 0, (0, 0)));
    }
}
