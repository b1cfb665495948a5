//! The queue's order between users: fair share over what each user holds now.
//!
//! A queued job's standing is the number of jobs its user already runs plus the number
//! of that user's jobs queued before it (by submission); the queue is ordered by standing,
//! then by how long ago the user last had a job started (longest first, never first),
//! then by submission. So users take turns: one user's backlog of thousands puts each
//! other user's next job behind at most one of theirs per job that user runs, instead of
//! behind all of them (FCFS); a user running nothing goes before one running much; and
//! where both run nothing (a full machine that frees one job's nodes at a time), the user
//! served longest ago goes first. This is a fair share of current use and of turns, with
//! no decayed history of node-hours (Slurm's fair-share factor weighs past usage; Flux's
//! queue is FCFS with per-user limits).
//!
//! With one user (or every job the same user's) the order is FCFS.

use std::collections::{HashMap, VecDeque};

use crate::scheduler::JobSpec;

/// Reorder `queue` by standing, then turn, then submission (job ids are given in
/// submission order). `running` counts each user's running jobs; `last_start` is when
/// each user last had a job started, as a count of starts (absent: never).
pub fn order(
    queue: &mut VecDeque<JobSpec>,
    running: &HashMap<u32, usize>,
    last_start: &HashMap<u32, u64>,
) {
    if queue.len() < 2 {
        return;
    }
    let mut jobs: Vec<JobSpec> = queue.drain(..).collect();
    jobs.sort_by_key(|j| j.id);
    let mut queued_before: HashMap<u32, usize> = HashMap::new();
    let mut keyed: Vec<((usize, u64), JobSpec)> = jobs
        .into_iter()
        .map(|j| {
            let n = queued_before.entry(j.user).or_default();
            let standing = running.get(&j.user).copied().unwrap_or(0) + *n;
            *n += 1;
            let turn = last_start.get(&j.user).copied().unwrap_or(0);
            ((standing, turn), j)
        })
        .collect();
    keyed.sort_by_key(|(key, j)| (*key, j.id));
    queue.extend(keyed.into_iter().map(|(_, j)| j));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Shape;
    use crate::plan::JobId;

    fn job(id: u64, user: u32) -> JobSpec {
        JobSpec {
            id: JobId(id),
            shape: Shape::new(1, 1),
            estimate: None,
            user,
        }
    }

    fn ids(q: &VecDeque<JobSpec>) -> Vec<u64> {
        q.iter().map(|j| j.id.0).collect()
    }

    #[test]
    fn a_backlog_does_not_hold_up_another_users_job() {
        let mut q: VecDeque<JobSpec> = (1..=1000).map(|i| job(i, 7)).collect();
        q.push_back(job(1001, 8));
        order(&mut q, &HashMap::new(), &HashMap::new());
        assert_eq!(ids(&q)[..3], [1, 1001, 2]);
        // A user already running a job goes after one running none.
        let mut q: VecDeque<JobSpec> = [job(1, 7), job(2, 8)].into();
        order(&mut q, &[(7, 1)].into(), &HashMap::new());
        assert_eq!(ids(&q), [2, 1]);
    }

    #[test]
    fn users_take_turns_and_one_user_is_fcfs() {
        let mut q: VecDeque<JobSpec> =
            [job(5, 1), job(1, 1), job(2, 2), job(3, 2), job(4, 3)].into();
        order(&mut q, &HashMap::new(), &HashMap::new());
        assert_eq!(ids(&q), [1, 2, 4, 3, 5]);
        let mut q: VecDeque<JobSpec> = [job(3, 1), job(1, 1), job(2, 1)].into();
        order(&mut q, &[(1, 5)].into(), &HashMap::new());
        assert_eq!(ids(&q), [1, 2, 3]);
    }
}

#[cfg(test)]
mod scheduler_tests {
    use crate::mesh::{Mesh, Shape};
    use crate::plan::{Decision, JobId};
    use crate::scheduler::{Config, JobSpec, Scheduler};

    fn started(plan: &crate::plan::Plan) -> Vec<u64> {
        plan.decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Start { job, .. } => Some(job.0),
                _ => None,
            })
            .collect()
    }

    /// On a full machine, the other user's job is the next to start.
    #[test]
    fn the_scheduler_starts_the_other_users_job_next() {
        let cfg = Config {
            mpl: 1,
            ..Config::default()
        };
        let mut s = Scheduler::new(Mesh::new(1, 1), cfg).unwrap();
        let job = |id: u64, user: u32| JobSpec {
            id: JobId(id),
            shape: Shape::new(1, 1),
            estimate: None,
            user,
        };
        for id in 1..=40 {
            s.submit(id as f64, job(id, 7)).unwrap();
        }
        s.submit(41.0, job(41, 8)).unwrap();
        let plan = s.finish(42.0, JobId(1)).unwrap();
        assert_eq!(started(&plan), [41]);
        s.check_invariants().unwrap();
        // Then the flooder again, in submission order.
        let plan = s.finish(43.0, JobId(41)).unwrap();
        assert_eq!(started(&plan), [2]);
        s.check_invariants().unwrap();
    }
}
