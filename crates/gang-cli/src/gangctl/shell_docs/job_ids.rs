//! Job ids for a Tab: the caller's jobs on the cluster that prun and gangctl would reach
//! (GANG_MASTER, the client config, the newest local cluster), from one ListJobs bounded
//! by [`WAIT`]. No master, a slow one, or any error: no ids, and nothing printed.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::ArgValueCompleter;
use gang_proto::v1::{JobInfo, JobState, ListJobsRequest};

use super::complete::comma_list;

/// How long a Tab may wait for the master.
pub const WAIT: Duration = Duration::from_millis(1500);
/// The newest jobs offered, at most.
const MOST: u32 = 200;

/// Which jobs an argument takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Queued, starting or running (cancel, attach, update).
    Active,
    /// Queued (hold, release).
    Queued,
    /// Any, ended ones too (jobs, job, acct, output).
    Any,
}

impl Offer {
    fn states(self) -> Vec<i32> {
        let states: &[JobState] = match self {
            Offer::Active => &[JobState::Queued, JobState::Starting, JobState::Running],
            Offer::Queued => &[JobState::Queued],
            Offer::Any => &[],
        };
        states.iter().map(|s| *s as i32).collect()
    }
}

/// A job-id argument's completer (comma lists too: `3,5` then Tab).
pub fn job_ids(offer: Offer) -> ArgValueCompleter {
    ArgValueCompleter::new(move |current: &OsStr| {
        let jobs: Vec<(String, String)> = fetch(offer)
            .iter()
            .map(|j| {
                let name = crate::output::format::job_name(j);
                (j.id.to_string(), format!("{name} ({})", j.state().label()))
            })
            .collect();
        let words: Vec<(&str, &str)> = jobs.iter().map(|(i, h)| (i.as_str(), h.as_str())).collect();
        comma_list(current, &words)
    })
}

/// The caller's jobs (every user's for root, who may act on them), newest first.
fn fetch(offer: Offer) -> Vec<JobInfo> {
    let Ok(master) = crate::connect::client_config::master(std::env::var("GANG_MASTER").ok())
    else {
        return Vec::new();
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let listed = rt.block_on(async {
        tokio::time::timeout(WAIT, async {
            let mut client = crate::connect::job_client(&master).await.ok()?;
            let request = ListJobsRequest {
                states: offer.states(),
                limit: MOST,
                before_id: 0,
            };
            Some(client.list_jobs(request).await.ok()?.into_inner().jobs)
        })
        .await
        .ok()
        .flatten()
    });
    let uid = nix::unistd::getuid().as_raw();
    listed
        .unwrap_or_default()
        .into_iter()
        .filter(|j| uid == 0 || j.uid == uid)
        .collect()
}
