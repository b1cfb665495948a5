//! The API's semantics, each through real rank processes under the fake agent.

mod common;

use std::time::Duration;

use common::{Job, JobSpec, example};

const LIMIT: Duration = Duration::from_secs(60);

fn run(spec: JobSpec) {
    Job::start(spec).expect_success(LIMIT);
}

#[test]
fn any_source_and_any_tag_matching() {
    run(JobSpec::new(example("api_checks"), 2, 2)
        .arg("--mode")
        .arg("any"));
}

#[test]
fn any_source_matching_over_tcp() {
    run(JobSpec::new(example("api_checks"), 3, 1)
        .arg("--mode")
        .arg("any")
        .env("GANG_MSG_TRANSPORT", "tcp"));
}

#[test]
fn nonblocking_requests() {
    run(JobSpec::new(example("api_checks"), 2, 2)
        .arg("--mode")
        .arg("nonblocking"));
}

#[test]
fn collectives_give_closed_form_results() {
    // 5 ranks: not a power of two, so the trees are uneven.
    run(JobSpec::new(example("api_checks"), 5, 1)
        .arg("--mode")
        .arg("collectives"));
    run(JobSpec::new(example("api_checks"), 1, 1)
        .arg("--mode")
        .arg("collectives"));
}

#[test]
fn ring_alltoall_and_halo_without_switches() {
    run(JobSpec::new(example("ring"), 4, 1)
        .arg("--iters")
        .arg("300")
        .arg("--max-size")
        .arg("300000"));
    run(JobSpec::new(example("alltoall"), 2, 2)
        .arg("--iters")
        .arg("200"));
    run(JobSpec::new(example("halo"), 3, 2)
        .arg("--iters")
        .arg("200"));
}

#[test]
fn mixed_hosts_use_tcp_between_hosts_and_unix_within() {
    let hosts = vec!["a".to_string(), "a".into(), "b".into(), "b".into()];
    let mut spec = JobSpec::new(example("alltoall"), 4, 1)
        .arg("--iters")
        .arg("100");
    spec.hosts = Some(hosts);
    run(spec);
}

#[test]
fn a_rank_started_by_hand_is_a_job_of_one() {
    let st = std::process::Command::new(example("api_checks"))
        .args(["--mode", "collectives"])
        .env_remove("GANG_SIZE")
        .env_remove("GANG_MSG_DIR")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn init_names_a_missing_variable() {
    let st = std::process::Command::new(example("ring"))
        .env("GANG_SIZE", "2")
        .env("GANG_RANK", "0")
        .env_remove("GANG_MSG_DIR")
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("GANG_MSG_DIR"), "{err}");
}
