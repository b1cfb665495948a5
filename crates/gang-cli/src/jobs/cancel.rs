//! `gangctl cancel`, as scancel takes it: ids and ranges (`71-75`, `3,5-9`), `--user`,
//! `--state` (of the active states), combined as a conjunction.

use gang_proto::v1::{CancelRequest, JobInfo, JobState};

use crate::connect::{self, CliError};
use crate::jobs::job_filter::{JobFilter, JobSel, States};
use crate::output::OutputMode;
use crate::output::views::{CancelledView, ErrorView};

/// The states a job can be cancelled in.
const ACTIVE: [JobState; 3] = [JobState::Queued, JobState::Starting, JobState::Running];

/// What to cancel: the filter of `gangctl jobs` and the active states asked for.
#[derive(Debug, Clone)]
pub struct CancelSel {
    pub filter: JobFilter,
    /// Active states only; `None`: all three.
    pub states: Option<Vec<JobState>>,
}

impl CancelSel {
    /// Checks what the command line named: something must be named (a bare `gangctl
    /// cancel` cancelling everyone's jobs would be a disaster waiting for a typo), and
    /// only active states can be cancelled.
    pub fn new(filter: JobFilter, states: Option<States>) -> Result<CancelSel, String> {
        if filter.sel.is_none() && filter.user.is_none() && states.is_none() {
            return Err("name the jobs to cancel: ids or ranges (3,5-9), --user or --state".into());
        }
        if filter.sel == Some(JobSel::Last) {
            return Err("`last` is for gangctl jobs; name the job to cancel by its id".into());
        }
        if let Some(States(s)) = &states
            && let Some(done) = s.iter().find(|s| !ACTIVE.contains(s))
        {
            return Err(format!(
                "a {} job has ended and cannot be cancelled: --state takes queued (PD), \
                 starting (CF) or running (R)",
                done.label()
            ));
        }
        Ok(CancelSel {
            filter,
            states: states.map(|s| s.0),
        })
    }

    /// Single ids with nothing else: cancelled one by one, so that one that does not exist
    /// or has ended is reported by the master by name.
    fn single_ids_only(&self) -> Option<&[u64]> {
        match (&self.filter.sel, &self.filter.user, &self.states) {
            (Some(JobSel::Ids { single, ranges }), None, None) if ranges.is_empty() => Some(single),
            _ => None,
        }
    }
}

/// Cancel what `sel` names; prints each job cancelled and each refusal (going on with the
/// others, as scancel does). Exit status 1 if any was refused.
pub async fn cancel(master: &str, mode: OutputMode, sel: CancelSel) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    let ids: Vec<u64> = match sel.single_ids_only() {
        Some(ids) => ids.to_vec(),
        None => {
            let states = sel.states.clone().unwrap_or(ACTIVE.to_vec());
            let states: Vec<i32> = states.iter().map(|s| *s as i32).collect();
            let listed = crate::jobs::listing::list(&mut client, &states, 0).await?;
            let mut ids: Vec<u64> = listed
                .iter()
                .filter(|j| sel.filter.matches(j))
                .map(|j| j.id)
                .collect();
            // A single id named beside a filter must still exist and match: the master
            // says why it cannot be cancelled if it is not among the active jobs.
            if let Some(JobSel::Ids { single, .. }) = &sel.filter.sel
                && sel.filter.user.is_none()
                && sel.states.is_none()
            {
                ids.extend(single.iter().copied());
            }
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                eprintln!("gangctl: no active job matched; nothing cancelled");
            }
            ids
        }
    };
    let mut cancelled: Vec<JobInfo> = Vec::new();
    let mut failed = false;
    for job_id in ids {
        // The master knows who we are from the connection (uid 0: "the caller").
        match client.cancel(CancelRequest { job_id, uid: 0 }).await {
            Ok(resp) => cancelled.push(resp.into_inner().job.unwrap_or_else(|| JobInfo {
                id: job_id,
                ..Default::default()
            })),
            Err(status) => {
                mode.eprint(&ErrorView::of("gangctl", &CliError::from(status)));
                failed = true;
            }
        }
    }
    mode.print(&CancelledView(&cancelled));
    Ok(if failed { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::job_filter::parse_job_sel;

    fn sel(ids: &[&str]) -> Option<JobSel> {
        parse_job_sel(&ids.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn something_must_be_named_and_only_active_states() {
        let none = JobFilter::default();
        assert!(
            CancelSel::new(none.clone(), None)
                .unwrap_err()
                .contains("name the jobs")
        );
        let done = States(vec![JobState::Completed]);
        let e = CancelSel::new(none.clone(), Some(done)).unwrap_err();
        assert!(e.contains("a completed job has ended"), "{e}");
        let last = JobFilter {
            sel: sel(&["last"]),
            ..Default::default()
        };
        assert!(CancelSel::new(last, None).is_err());
        assert!(CancelSel::new(none, Some(States(vec![JobState::Queued]))).is_ok());
    }

    #[test]
    fn single_ids_go_one_by_one_and_ranges_through_the_list() {
        let ids = |a: &[&str]| JobFilter {
            sel: sel(a),
            ..Default::default()
        };
        let s = CancelSel::new(ids(&["3,9"]), None).unwrap();
        assert_eq!(s.single_ids_only(), Some(&[3, 9][..]));
        let s = CancelSel::new(ids(&["71-75"]), None).unwrap();
        assert_eq!(s.single_ids_only(), None);
        let mut f = ids(&["3"]);
        f.user = Some("alice".into());
        assert_eq!(CancelSel::new(f, None).unwrap().single_ids_only(), None);
    }
}
