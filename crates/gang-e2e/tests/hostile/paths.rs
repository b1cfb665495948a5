//! What the agent looks up for a launch (working directory, program, what it links) is
//! looked up as the submitting user: an answer must not tell them what exists where they
//! may not look.

use super::*;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{JobSpec, SubmitRequest};

/// Finding: the agent checked a job's working directory as root, so `/root/nonexistent`
/// failed with "No such file" and `/root` with "Permission denied": any user could probe
/// root's home (or anyone's) for names. Both now fail the same way, as the user's own
/// `cd` would.
#[test]
fn a_working_directory_the_user_may_not_enter_reveals_nothing() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("pa", &[]);
    let (c, sockets) = shared_cluster(1, 1, |_| {});
    // Root's private directory, with something in it.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let there = private.path().join("there");
    std::fs::create_dir(&there).unwrap();
    let missing = private.path().join("missing");
    let socket = sockets.path().join("master.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut reasons = Vec::new();
    for cwd in [&there, &missing] {
        let id = rt.block_on(async {
            let mut jobs = JobServiceClient::new(accounts::channel_as(&socket, &mallory).await);
            jobs.submit(SubmitRequest {
                spec: Some(JobSpec {
                    shape: "1".into(),
                    argv: vec!["true".into()],
                    cwd: cwd.display().to_string(),
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
        });
        let job = gang_e2e::wait_state(&c, id, "failed", Duration::from_secs(30));
        let reason = job["reason"].as_str().unwrap().to_string();
        reasons.push(reason.replace(&cwd.display().to_string(), "DIR"));
    }
    assert_eq!(reasons[0], reasons[1], "the two failures differ");
    assert!(reasons[0].contains("Permission denied"), "{}", reasons[0]);
}
