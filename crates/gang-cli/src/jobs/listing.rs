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
