//! The queue between users: one user's backlog does not hold up another user's job.

use super::*;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{JobSpec, SubmitRequest};

async fn submit(jobs: &mut JobServiceClient<tonic::transport::Channel>, argv: &[&str]) -> u64 {
    jobs.submit(SubmitRequest {
        spec: Some(JobSpec {
            shape: "1".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: "/".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .expect("the submission is accepted")
    .into_inner()
    .job
    .expect("the job")
    .id
}

/// Finding: one user's 3,000 queued jobs made another user's 1-node job wait behind all
/// of them ("priority"). With fair share the other user's job is next, behind only the
/// job that runs when it arrives.
#[test]
fn a_backlog_of_one_user_does_not_hold_up_another() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let flood = accounts.user("fa", &[]);
    let other = accounts.user("fb", &[]);
    // Space sharing (the e2e default, --mpl 1): one job at a time on the one node.
    let (c, sockets) = shared_cluster(1, 1, |_| {});
    let socket = sockets.path().join("master.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    const BACKLOG: usize = 40;
    let flooded: Vec<u64> = rt.block_on(async {
        let mut jobs = JobServiceClient::new(accounts::channel_as(&socket, &flood).await);
        let mut ids = vec![];
        for _ in 0..BACKLOG {
            ids.push(submit(&mut jobs, &["sleep", "1"]).await);
        }
        ids
    });
    let mine = rt.block_on(async {
        let mut jobs = JobServiceClient::new(accounts::channel_as(&socket, &other).await);
        submit(&mut jobs, &["true"]).await
    });
    gang_e2e::wait_state(&c, mine, "completed", Duration::from_secs(60));
    // When it is done, at most the flooder's job running at its submission (and the one
    // the master may have started in the same instant) has run.
    let done = flooded
        .iter()
        .filter(|&&id| gang_e2e::job(&c, id)["state"] == "completed")
        .count();
    assert!(
        done <= 2,
        "{done} of the flooder's {BACKLOG} jobs ran before the other user's"
    );
    for id in flooded {
        let _ = gang_e2e::gangctl(&c, &["cancel", &id.to_string()]);
    }
}
