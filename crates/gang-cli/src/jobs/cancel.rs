//! `gangctl cancel`, as scancel takes it: ids and ranges (`71-75`, `3,5-9`), steps
//! (`12.1`) and array tasks (`17_3`, `17_[10-20]`), `--user`, `--state` (of the active
//! states), combined as a conjunction.

use gang_proto::v1::{CancelRequest, JobInfo, JobState};

use crate::connect::{self, CliError};
use crate::jobs::job_filter::{JobFilter, JobSel, States};
use crate::jobs::job_ref::Named;
use crate::output::OutputMode;
use crate::output::views::{CancelledView, ErrorView};

/// The states a job can be cancelled in.
const ACTIVE: [JobState; 3] = [JobState::Queued, JobState::Starting, JobState::Running];

/// What to cancel: the jobs named, the user and the active states asked for.
#[derive(Debug, Clone)]
pub struct CancelSel {
    pub named: Option<Named>,
    pub user: Option<String>,
    /// Active states only; `None`: all three.
    pub states: Option<Vec<JobState>>,
}

impl CancelSel {
    /// Checks what the command line named: something must be named (a bare `gangctl
    /// cancel` cancelling everyone's jobs would be a disaster waiting for a typo), and
    /// only active states can be cancelled.
    pub fn new(
        named: Option<Named>,
        user: Option<String>,
        states: Option<States>,
    ) -> Result<CancelSel, String> {
        if named.is_none() && user.is_none() && states.is_none() {
            return Err(
                "name the jobs to cancel: ids or ranges (3,5-9), steps (12.1), tasks \
                 (17_[1-4]), --user or --state"
                    .into(),
            );
        }
        // The newest job may be one submitted a moment ago by another window: a cancel
        // names what it ends.
        if named == Some(Named::Last) {
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
            named,
            user,
            states: states.map(|s| s.0),
        })
    }

    /// Single ids with nothing else: cancelled one by one, so that one that does not exist
    /// or has ended is reported by the master by name.
    fn single_ids_only<'a>(&self, sel: Option<&'a JobSel>) -> Option<&'a [u64]> {
        match (sel, &self.user, &self.states) {
            (Some(s), None, None) if s.ranges.is_empty() => Some(&s.single),
            _ => None,
        }
    }
}

/// Cancel what `sel` names; prints each job cancelled and each refusal (going on with the
/// others, as scancel does). Exit status 1 if any was refused.
pub async fn cancel(master: &str, mode: OutputMode, sel: CancelSel) -> Result<i32, CliError> {
    let mut client = connect::job_client(master).await?;
    let filter = JobFilter {
        sel: match &sel.named {
            Some(n) => Some(super::resolve::resolve(&mut client, master, n).await?),
            None => None,
        },
        user: sel.user.clone(),
        since_ns: None,
    };
    let ids: Vec<u64> = match sel.single_ids_only(filter.sel.as_ref()) {
        Some(ids) => ids.to_vec(),
        None => {
            let states = sel.states.clone().unwrap_or(ACTIVE.to_vec());
            let states: Vec<i32> = states.iter().map(|s| *s as i32).collect();
            let listed = crate::jobs::listing::list(&mut client, &states, 0).await?;
            let mut ids: Vec<u64> = listed
                .iter()
                .filter(|j| filter.matches(j))
                .map(|j| j.id)
                .collect();
            // A single id named beside a filter must still exist and match: the master
            // says why it cannot be cancelled if it is not among the active jobs.
            if let Some(s) = &filter.sel
                && sel.user.is_none()
                && sel.states.is_none()
            {
                ids.extend(s.single.iter().copied());
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
    use crate::jobs::job_ref::parse_named;

    fn named(ids: &[&str]) -> Option<Named> {
        parse_named(&ids.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn something_must_be_named_and_only_active_states() {
        let e = CancelSel::new(None, None, None).unwrap_err();
        assert!(e.contains("name the jobs"), "{e}");
        let done = States(vec![JobState::Completed]);
        let e = CancelSel::new(None, None, Some(done)).unwrap_err();
        assert!(e.contains("a completed job has ended"), "{e}");
        assert!(CancelSel::new(named(&["last"]), None, None).is_err());
        assert!(CancelSel::new(None, None, Some(States(vec![JobState::Queued]))).is_ok());
        assert!(CancelSel::new(named(&["12.1,17_[10-20]"]), None, None).is_ok());
    }

    #[test]
    fn single_ids_go_one_by_one_and_ranges_through_the_list() {
        let s = CancelSel::new(named(&["3,9"]), None, None).unwrap();
        let ids = JobSel {
            single: vec![3, 9],
            ranges: vec![],
        };
        assert_eq!(s.single_ids_only(Some(&ids)), Some(&[3, 9][..]));
        let range = JobSel {
            single: vec![],
            ranges: vec![(71, 75)],
        };
        assert_eq!(s.single_ids_only(Some(&range)), None);
        let s = CancelSel::new(named(&["3"]), Some("alice".into()), None).unwrap();
        assert_eq!(s.single_ids_only(Some(&ids)), None);
    }
}
