//! Listing jobs a page at a time: the master answers ListJobs in pages (at most 1,000 jobs
//! or about 1 MiB each, `next_before_id` saying where the next begins), so that no answer
//! passes a message limit however long the history or large the jobs.

use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{JobInfo, ListJobsRequest};

use gang_proto::client::MasterChannel;

use crate::connect::CliError;

/// The jobs in `states` (empty: all), newest first, at most `limit` (0: every one).
pub async fn list(
    client: &mut JobServiceClient<MasterChannel>,
    states: &[i32],
    limit: usize,
) -> Result<Vec<JobInfo>, CliError> {
    let mut jobs: Vec<JobInfo> = Vec::new();
    let mut before = 0;
    loop {
        let want = match limit {
            0 => 0,
            n => (n - jobs.len()).min(u32::MAX as usize) as u32,
        };
        let page = client
            .list_jobs(ListJobsRequest {
                states: states.to_vec(),
                limit: want,
                before_id: before,
            })
            .await?
            .into_inner();
        jobs.extend(page.jobs);
        // An older master sends no next page: what it sent is all.
        if page.next_before_id == 0 || (limit > 0 && jobs.len() >= limit) {
            jobs.truncate(if limit > 0 { limit } else { jobs.len() });
            return Ok(jobs);
        }
        if page.next_before_id >= before && before != 0 {
            return Err(CliError::other(format!(
                "the master's listing did not move on (next page before job {} after before {before})",
                page.next_before_id
            )));
        }
        before = page.next_before_id;
    }
}

/// The newest job for which `pred` holds, looked for a page at a time (newest first).
pub async fn newest(
    client: &mut JobServiceClient<MasterChannel>,
    pred: impl Fn(&JobInfo) -> bool,
) -> Result<Option<JobInfo>, CliError> {
    let mut before = 0;
    loop {
        let page = client
            .list_jobs(ListJobsRequest {
                states: Vec::new(),
                limit: 0,
                before_id: before,
            })
            .await?
            .into_inner();
        if let Some(j) = page.jobs.into_iter().find(&pred) {
            return Ok(Some(j));
        }
        if page.next_before_id == 0 || (before != 0 && page.next_before_id >= before) {
            return Ok(None);
        }
        before = page.next_before_id;
    }
}

/// The steps of the allocations among `jobs` that are not among them (in `states`, if
/// any), fetched and added: sacct shows an allocation with its steps.
pub async fn add_steps(
    client: &mut JobServiceClient<MasterChannel>,
    jobs: &mut Vec<JobInfo>,
    states: &[i32],
) -> Result<(), CliError> {
    let have: std::collections::HashSet<u64> = jobs.iter().map(|j| j.id).collect();
    let missing: Vec<u64> = jobs
        .iter()
        .flat_map(|j| j.step_ids.iter().copied())
        .filter(|s| !have.contains(s))
        .collect();
    for job_id in missing {
        let j = client
            .get_job(gang_proto::v1::GetJobRequest { job_id })
            .await?
            .into_inner();
        if states.is_empty() || states.contains(&j.state) {
            jobs.push(j);
        }
    }
    Ok(())
}
