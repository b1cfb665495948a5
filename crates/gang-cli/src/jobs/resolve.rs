//! Job references ([`super::job_ref`]) turned into job ids, as the master knows them: a
//! step `N.S` is the S-th of allocation N's steps, a task `N_T` the job whose place among
//! array N's tasks (their ids are consecutive from N, in index order) is T's, and `last`
//! the caller's newest job that is not a step. Errors say what there is instead.

use std::collections::HashMap;

use gang_proto::client::MasterChannel;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{GetJobRequest, JobInfo};

use super::job_filter::JobSel;
use super::job_ref::{Indices, JobRef, Named};
use crate::connect::CliError;
use crate::output::format::fmt_indices;

/// The ids `named` stands for: single ids (a step, a task) must exist, ranges (of ids or
/// task indices) skip what does not.
pub async fn resolve(
    client: &mut JobServiceClient<MasterChannel>,
    master: &str,
    named: &Named,
) -> Result<JobSel, CliError> {
    let refs = match named {
        Named::Last => {
            return Ok(JobSel {
                single: vec![newest_own(client, master).await?],
                ranges: vec![],
            });
        }
        Named::Refs(r) => r,
    };
    let mut sel = JobSel::default();
    let mut known: HashMap<u64, JobInfo> = HashMap::new();
    for r in refs {
        match r {
            JobRef::Id(n) => sel.single.push(*n),
            JobRef::Range(a, b) => sel.ranges.push((*a, *b)),
            JobRef::Step { alloc, step } => {
                let j = lookup(client, &mut known, *alloc).await?;
                sel.single.push(step_id(j, *step).map_err(not_found)?);
            }
            JobRef::Tasks { array, indices, .. } => {
                let j = lookup(client, &mut known, *array).await?;
                add_tasks(j, indices, &mut sel).map_err(not_found)?;
            }
        }
    }
    Ok(sel)
}

/// The one job `named` stands for (`gangctl job`, `attach`, `output`, `update`).
pub async fn resolve_one(
    client: &mut JobServiceClient<MasterChannel>,
    master: &str,
    named: &Named,
) -> Result<u64, CliError> {
    let sel = resolve(client, master, named).await?;
    match (sel.single.as_slice(), sel.ranges.as_slice()) {
        ([id], []) => Ok(*id),
        _ => Err(CliError::other(
            "name one job: ID, ID.STEP, ID_TASK or `last`",
        )),
    }
}

/// Whether `named` can only be one job (checked before asking the master).
pub fn names_one(named: &Named) -> bool {
    match named {
        Named::Last => true,
        Named::Refs(r) => match r.as_slice() {
            [JobRef::Id(_) | JobRef::Step { .. }] => true,
            [JobRef::Tasks { indices, .. }] => matches!(indices.as_slice(), [Indices::One(_)]),
            _ => false,
        },
    }
}

/// An answer of ours that means "no such thing": the master's code for it, exit 1.
fn not_found(msg: String) -> CliError {
    CliError::Rpc(tonic::Status::not_found(msg))
}

async fn lookup<'a>(
    client: &mut JobServiceClient<MasterChannel>,
    known: &'a mut HashMap<u64, JobInfo>,
    id: u64,
) -> Result<&'a JobInfo, CliError> {
    Ok(match known.entry(id) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let j = client
                .get_job(GetJobRequest { job_id: id })
                .await?
                .into_inner();
            e.insert(j)
        }
    })
}

/// Step `step` of allocation `alloc` (steps are numbered from 0 in their order).
pub fn step_id(alloc: &JobInfo, step: u32) -> Result<u64, String> {
    let n = alloc.id;
    let is_alloc = alloc.spec.as_ref().is_some_and(|s| s.allocate);
    let steps = &alloc.step_ids;
    match steps.get(step as usize) {
        Some(&id) => Ok(id),
        None if !is_alloc && steps.is_empty() => {
            Err(format!("job {n} is not an allocation: it has no steps"))
        }
        None if steps.is_empty() => Err(format!(
            "allocation {n} has no steps yet; there is no {n}.{step}"
        )),
        None if steps.len() == 1 => Err(format!(
            "allocation {n} has step {n}.0; there is no {n}.{step}"
        )),
        None => Err(format!(
            "allocation {n} has steps {n}.0-{n}.{}; there is no {n}.{step}",
            steps.len() - 1
        )),
    }
}

/// Array `array`'s tasks of `indices` into `sel`: one index as a single id, a range of
/// indices as the ranges of ids it covers (tasks that have ended stay in a range, as ids
/// do; a range that covers no task is an error).
pub fn add_tasks(array: &JobInfo, indices: &[Indices], sel: &mut JobSel) -> Result<(), String> {
    let n = array.id;
    if array.array_job_id != n || array.array_task_indices.is_empty() {
        return Err(match (array.array_job_id, array.array_task_id) {
            (a, Some(t)) if a != 0 && a != n => {
                format!("job {n} is not an array: it is task {a}_{t} of array {a}")
            }
            _ => format!("job {n} is not an array"),
        });
    }
    let have = &array.array_task_indices;
    let tasks = || {
        let word = if have.len() == 1 { "task" } else { "tasks" };
        format!("array {n} has {word} {}", fmt_indices(have))
    };
    for i in indices {
        match *i {
            Indices::One(t) => match have.iter().position(|&x| x == t) {
                Some(p) => sel.single.push(n + p as u64),
                None => return Err(format!("{}; there is no task {t}", tasks())),
            },
            Indices::Range(a, b) => {
                let places: Vec<u64> = (0..have.len() as u64)
                    .filter(|&p| (a..=b).contains(&have[p as usize]))
                    .collect();
                if places.is_empty() {
                    return Err(format!("{}; none is in {a}-{b}", tasks()));
                }
                // Runs of places, each a range of ids.
                let mut start = places[0];
                for w in places.windows(2) {
                    if w[1] != w[0] + 1 {
                        sel.ranges.push((n + start, n + w[0]));
                        start = w[1];
                    }
                }
                sel.ranges.push((n + start, n + places[places.len() - 1]));
            }
        }
    }
    Ok(())
}

/// Whether `j` is the caller's: by uid on the master's socket (which knows the caller by
/// it), by user name over TLS (a certificate or token names a user).
fn is_mine(master: &str, j: &JobInfo) -> bool {
    let uid = nix::unistd::getuid();
    if master.starts_with("unix:") {
        return j.uid == uid.as_raw();
    }
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .is_some_and(|u| u.name == j.user)
}

/// The caller's newest job that is not a step (`last`).
async fn newest_own(
    client: &mut JobServiceClient<MasterChannel>,
    master: &str,
) -> Result<u64, CliError> {
    let found =
        super::listing::newest(client, |j| j.allocation_id == 0 && is_mine(master, j)).await?;
    found.map(|j| j.id).ok_or_else(|| {
        not_found("you have no job here yet (`last` is your newest job that is not a step)".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::JobSpec;

    fn alloc(id: u64, steps: &[u64]) -> JobInfo {
        JobInfo {
            id,
            spec: Some(JobSpec {
                allocate: true,
                ..Default::default()
            }),
            step_ids: steps.to_vec(),
            ..Default::default()
        }
    }

    fn array(id: u64, indices: &[u32]) -> JobInfo {
        JobInfo {
            id,
            array_job_id: id,
            array_task_id: indices.first().copied(),
            array_task_indices: indices.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn steps_by_number_or_what_there_is() {
        let a = alloc(2, &[3, 4, 5]);
        assert_eq!(step_id(&a, 1), Ok(4));
        assert_eq!(
            step_id(&a, 5).unwrap_err(),
            "allocation 2 has steps 2.0-2.2; there is no 2.5"
        );
        assert_eq!(
            step_id(&alloc(2, &[3]), 1).unwrap_err(),
            "allocation 2 has step 2.0; there is no 2.1"
        );
        assert_eq!(
            step_id(&alloc(2, &[]), 0).unwrap_err(),
            "allocation 2 has no steps yet; there is no 2.0"
        );
        let plain = JobInfo {
            id: 2,
            ..Default::default()
        };
        assert_eq!(
            step_id(&plain, 0).unwrap_err(),
            "job 2 is not an allocation: it has no steps"
        );
    }

    #[test]
    fn tasks_by_index_or_what_there_is() {
        let a = array(17, &(1..=20).collect::<Vec<_>>());
        let mut sel = JobSel::default();
        add_tasks(&a, &[Indices::One(10), Indices::Range(12, 14)], &mut sel).unwrap();
        assert_eq!(sel.single, [26]);
        assert_eq!(sel.ranges, [(28, 30)]);
        let e = add_tasks(&a, &[Indices::One(30)], &mut sel).unwrap_err();
        assert_eq!(e, "array 17 has tasks 1-20; there is no task 30");
        let e = add_tasks(&a, &[Indices::Range(30, 40)], &mut sel).unwrap_err();
        assert_eq!(e, "array 17 has tasks 1-20; none is in 30-40");

        // Indices with gaps: a range covers those there are, as runs of ids.
        let gaps = array(40, &[1, 3, 5, 6, 7, 10]);
        let mut sel = JobSel::default();
        add_tasks(&gaps, &[Indices::Range(2, 7)], &mut sel).unwrap();
        assert_eq!(sel.ranges, [(41, 44)]);
        let e = add_tasks(&gaps, &[Indices::One(2)], &mut sel).unwrap_err();
        assert_eq!(e, "array 40 has tasks 1,3,5-7,10; there is no task 2");

        let plain = JobInfo {
            id: 9,
            ..Default::default()
        };
        assert_eq!(
            add_tasks(&plain, &[Indices::One(1)], &mut sel).unwrap_err(),
            "job 9 is not an array"
        );
        let task = JobInfo {
            id: 19,
            array_job_id: 17,
            array_task_id: Some(3),
            ..Default::default()
        };
        assert_eq!(
            add_tasks(&task, &[Indices::One(1)], &mut sel).unwrap_err(),
            "job 19 is not an array: it is task 17_3 of array 17"
        );
    }

    #[test]
    fn one_job_is_one_id_one_step_one_task_or_last() {
        let one = |s: &str| {
            names_one(
                &super::super::job_ref::parse_named(&[s.into()])
                    .unwrap()
                    .unwrap(),
            )
        };
        assert!(one("12") && one("12.1") && one("17_3") && one("17_[3]") && one("last"));
        assert!(!one("3-5") && !one("3,4") && !one("17_[1-3]") && !one("17_[1,2]"));
    }
}
