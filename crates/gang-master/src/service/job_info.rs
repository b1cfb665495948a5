//! A job as clients see it (`JobInfo`), from the state's view of it, and listings of
//! jobs a page at a time.

use gang_proto::v1;

use super::convert::job_state;
use crate::state::views::JobView;

/// The most jobs one ListJobs answer carries.
pub const LIST_PAGE_JOBS: usize = 1000;
/// About the most bytes one ListJobs answer carries (one job is always sent, and a job is
/// at most a few hundred KiB: `max_argv_bytes`).
pub const LIST_PAGE_BYTES: usize = 1 << 20;

/// Views as one page of a listing: as many as fit `LIST_PAGE_BYTES` (at least one), and
/// where the next page begins if any were left out or `full` (the page was cut at its job
/// count, so more may follow).
pub fn list_page(views: &[JobView], full: bool) -> v1::ListJobsResponse {
    let mut jobs = Vec::new();
    let mut bytes = 0;
    for v in views {
        let info = job_info(v);
        let size = prost::Message::encoded_len(&info);
        if !jobs.is_empty() && bytes + size > LIST_PAGE_BYTES {
            return v1::ListJobsResponse {
                next_before_id: jobs.last().map_or(0, |j: &v1::JobInfo| j.id),
                jobs,
            };
        }
        bytes += size;
        jobs.push(info);
    }
    let next_before_id = if full {
        jobs.last().map_or(0, |j| j.id)
    } else {
        0
    };
    v1::ListJobsResponse {
        jobs,
        next_before_id,
    }
}

pub fn job_info(v: &JobView) -> v1::JobInfo {
    let gang = v1::GangMode::from(v.gang) as i32;
    v1::JobInfo {
        id: v.id.0,
        user: v.owner.user.clone(),
        uid: v.owner.uid,
        gid: v.owner.gid,
        spec: Some(super::convert::job_spec(v)),
        allocation_id: v.allocation.map_or(0, |a| a.0),
        step: v.step,
        step_ids: v.step_ids.iter().map(|s| s.0).collect(),
        held_by: v.hold.as_ref().map(|h| h.by.clone()).unwrap_or_default(),
        held_by_admin: v.hold.as_ref().is_some_and(|h| h.admin),
        array_job_id: v.array.map_or(0, |a| a.job.0),
        array_task_id: v.array.map(|a| a.task),
        array_throttle: v.array.map_or(0, |a| a.throttle),
        array_task_indices: v.array_indices.clone(),
        usage: (!v.usage.is_empty()).then(|| v1::JobUsage {
            ranks_measured: v.usage.ranks_measured,
            cpu_user_ns: v.usage.cpu_user_ns,
            cpu_system_ns: v.usage.cpu_system_ns,
            max_rss_bytes: v.usage.max_rss_bytes,
            max_rss_rank: v.usage.max_rss_rank,
            max_rss_x: rank_node(v, v.usage.max_rss_rank).map(|n| n.0),
            max_rss_y: rank_node(v, v.usage.max_rss_rank).map(|n| n.1),
        }),
        state: job_state(v.state()) as i32,
        w: v.w,
        h: v.h,
        submesh: v.submesh.map(Into::into),
        slices: v.slices.clone(),
        exit_code: v.exit_code,
        reason: v.reason.clone(),
        submit_ns: v.submit_ns,
        start_ns: v.start_ns,
        end_ns: v.end_ns,
        run_ns: v.run_ns,
        gang,
        ranks_done: v.ranks_done,
        deadlock: v.deadlock.as_ref().map(deadlock),
        on_deadlock: v1::DeadlockPolicy::from(v.on_deadlock) as i32,
        pending_reason: v.pending_reason.clone(),
        slice_rows: v.slice_rows.clone(),
        output_lost: v
            .output_lost
            .iter()
            .map(|l| v1::OutputLoss {
                rank: l.rank,
                stream: match l.stream {
                    crate::job::OutStream::Stdout => v1::Stream::Stdout,
                    crate::job::OutStream::Stderr => v1::Stream::Stderr,
                } as i32,
                bytes: l.bytes,
            })
            .collect(),
    }
}

/// A deadlock found, with every rank's wait.
fn deadlock(d: &crate::msg_jobs::DeadlockInfo) -> v1::Deadlock {
    v1::Deadlock {
        detected_ns: d.detected_ns,
        messages: d.messages,
        waits: d
            .waits
            .iter()
            .map(|(a, (x, y))| v1::RankWait {
                rank: a.rank,
                x: *x,
                y: *y,
                source: a.source,
                tag: a.tag,
                since_ns: a.blocked_since_ns,
            })
            .collect(),
    }
}

/// The node rank `rank` runs or ran on: ranks fill the job's submesh row by row from its
/// corner (an allocation's one rank, its batch script, is on its first node).
fn rank_node(v: &JobView, rank: u32) -> Option<(u32, u32)> {
    let sm = v.submesh?;
    (sm.w > 0 && u64::from(rank) < sm.area()).then(|| (sm.x + rank % sm.w, sm.y + rank / sm.w))
}

/// How far a launch down the order tree has got, for `prun -v`.
pub fn launch_progress(p: crate::actor::progress::Progress) -> v1::LaunchProgress {
    v1::LaunchProgress {
        subtrees_done: p.heads_done,
        subtrees: p.heads,
        ranks_started: p.ranks_started,
        ranks: p.ranks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::reactor;
    use crate::state::testkit::{World, config, new_job};

    #[test]
    fn the_largest_rss_is_placed_on_its_node_and_an_array_names_its_tasks() {
        let mut w = World::new(config(4, 4, 1));
        let mut job = new_job("2x2", 1000, 0);
        job.at_submit.array = Some(gang_core::schedule::array::parse("1,3,5-7%2", 100).unwrap());
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
            .unwrap();
        let id = 1;
        let first = job_info(&w.view(id));
        assert_eq!(first.array_task_indices, [1, 3, 5, 6, 7]);
        assert_eq!(first.array_throttle, 2);
        let third = job_info(&w.view(id + 2));
        assert_eq!((third.array_task_id, third.array_throttle), (Some(5), 2));
        assert!(
            third.array_task_indices.is_empty(),
            "only the array's own id lists them"
        );

        let mut v = w.view(id);
        v.record.submesh = Some(gang_core::Submesh::new(1, 2, 2, 2));
        v.record.usage.add(
            3,
            crate::job::RankUsage {
                mem_peak_bytes: Some(5 << 20),
                ..Default::default()
            },
        );
        let u = job_info(&v).usage.unwrap();
        assert_eq!(
            (u.max_rss_rank, u.max_rss_x, u.max_rss_y),
            (3, Some(2), Some(3))
        );
        v.record.submesh = None;
        let u = job_info(&v).usage.unwrap();
        assert_eq!(
            (u.max_rss_x, u.max_rss_y),
            (None, None),
            "not placed: not known"
        );
    }
}
