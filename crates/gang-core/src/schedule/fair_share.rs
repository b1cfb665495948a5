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

use crate::plan::JobId;

/// Reorder `queue` by standing, then turn, then submission (job ids are given in
/// submission order; `owner` gives each entry's job id and user). `running` counts each user's running jobs; `last_start` is when
/// each user last had a job started, as a count of starts (absent: never).
pub fn order<T>(
    queue: &mut VecDeque<T>,
    owner: impl Fn(&T) -> (JobId, u32),
    running: &HashMap<u32, usize>,
    last_start: &HashMap<u32, u64>,
) {
    if queue.len() < 2 {
        return;
    }
    let mut jobs: Vec<T> = queue.drain(..).collect();
    jobs.sort_by_key(|j| owner(j).0);
    let mut queued_before: HashMap<u32, usize> = HashMap::new();
    let mut keyed: Vec<((usize, u64, JobId), T)> = jobs
        .into_iter()
        .map(|j| {
            let (id, user) = owner(&j);
            let n = queued_before.entry(user).or_default();
            let standing = running.get(&user).copied().unwrap_or(0) + *n;
            *n += 1;
            let turn = last_start.get(&user).copied().unwrap_or(0);
            ((standing, turn, id), j)
        })
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    queue.extend(keyed.into_iter().map(|(_, j)| j));
}

#[cfg(test)]
mod tests {
    use super::*;

    type Job = (JobId, u32);

    fn job(id: u64, user: u32) -> Job {
        (JobId(id), user)
    }

    fn ordered(q: &[Job], running: &[(u32, usize)]) -> Vec<u64> {
        let mut q: VecDeque<Job> = q.iter().copied().collect();
        order(
            &mut q,
            |j| *j,
            &running.iter().copied().collect(),
            &HashMap::new(),
        );
        q.iter().map(|j| j.0.0).collect()
    }

    #[test]
    fn a_backlog_does_not_hold_up_another_users_job() {
        let mut q: Vec<Job> = (1..=1000).map(|i| job(i, 7)).collect();
        q.push(job(1001, 8));
        assert_eq!(ordered(&q, &[])[..3], [1, 1001, 2]);
        // A user already running a job goes after one running none.
        assert_eq!(ordered(&[job(1, 7), job(2, 8)], &[(7, 1)]), [2, 1]);
    }

    #[test]
    fn users_take_turns_and_one_user_is_fcfs() {
        let q = [job(5, 1), job(1, 1), job(2, 2), job(3, 2), job(4, 3)];
        assert_eq!(ordered(&q, &[]), [1, 2, 4, 3, 5]);
        assert_eq!(
            ordered(&[job(3, 1), job(1, 1), job(2, 1)], &[(1, 5)]),
            [1, 2, 3]
        );
    }

    #[test]
    fn of_two_users_running_nothing_the_one_served_longer_ago_goes_first() {
        let mut q: VecDeque<Job> = [job(2, 7), job(41, 8)].into();
        order(&mut q, |j| *j, &HashMap::new(), &[(7, 1)].into());
        assert_eq!(q.iter().map(|j| j.0.0).collect::<Vec<_>>(), [41, 2]);
    }
}
