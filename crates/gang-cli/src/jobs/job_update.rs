//! `gangctl hold`, `release` and `update`, as scontrol's: a queued job held is not started
//! until released; a job's time limit (users may lower it) and name can be changed.

use gang_proto::v1::{JobInfo, JobState, UpdateJobRequest};

use crate::connect::{self, CliError};
use crate::jobs::job_filter::JobSel;
use crate::jobs::job_ref::Named;
use crate::output::OutputMode;
use crate::output::views::ErrorView;

/// The ids `sel` names: single ids as given (the master says why one cannot be changed),
/// ranges among the queued jobs (hold and release are for queued jobs), and for a release
/// among the held ones only (the master refuses to release a job nobody holds).
async fn ids_of(master: &str, sel: &JobSel, releasing: bool) -> Result<Vec<u64>, CliError> {
    let mut ids = sel.single.clone();
    if !sel.ranges.is_empty() {
        let mut client = connect::job_client(master).await?;
        let listed = crate::jobs::listing::list(&mut client, &[JobState::Queued as i32], 0).await?;
        ids.extend(
            listed
                .iter()
                .filter(|j| sel.contains(j.id) && (!releasing || !j.held_by.is_empty()))
                .map(|j| j.id),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Hold (`hold = true`) or release the jobs `sel` names; each is reported (`held 12`,
/// `released 12`), refusals too, and the others go on. Exit status 1 if any was refused.
pub async fn hold(
    master: &str,
    mode: OutputMode,
    named: Named,
    hold: bool,
) -> Result<i32, CliError> {
    let sel = {
        let mut client = connect::job_client(master).await?;
        super::resolve::resolve(&mut client, master, &named).await?
    };
    let ids = ids_of(master, &sel, !hold).await?;
    if ids.is_empty() {
        let what = if hold { "queued" } else { "held" };
        eprintln!("gangctl: no {what} job matched");
    }
    let mut client = connect::job_client(master).await?;
    let mut changed: Vec<JobInfo> = Vec::new();
    let mut failed = false;
    for job_id in ids {
        let req = UpdateJobRequest {
            job_id,
            hold: Some(hold),
            ..Default::default()
        };
        match client.update_job(req).await {
            Ok(r) => changed.extend(r.into_inner().job),
            Err(status) => {
                mode.eprint(&ErrorView::of("gangctl", &CliError::from(status)));
                failed = true;
            }
        }
    }
    let word = if hold { "held" } else { "released" };
    mode.print(&crate::output::views::UpdatedView {
        jobs: &changed,
        word,
    });
    Ok(if failed { 1 } else { 0 })
}

/// Change one job's time limit and/or name.
pub async fn update(
    master: &str,
    mode: OutputMode,
    named: Named,
    time_limit_s: Option<u64>,
    name: Option<String>,
) -> Result<i32, CliError> {
    if time_limit_s.is_none() && name.is_none() {
        return Err(CliError::other(
            "nothing to change: give --time-limit or --name",
        ));
    }
    let mut client = connect::job_client(master).await?;
    let job_id = super::resolve::resolve_one(&mut client, master, &named).await?;
    let job = client
        .update_job(UpdateJobRequest {
            job_id,
            hold: None,
            time_limit_s,
            name,
        })
        .await?
        .into_inner()
        .job
        .unwrap_or_default();
    mode.print(&crate::output::views::UpdatedView {
        jobs: std::slice::from_ref(&job),
        word: "updated",
    });
    Ok(0)
}
