//! Requests that cost the master more than their share: one ordinary user's held array of
//! 1,001 tasks with a 256 KiB command line and a 1 MiB environment, arrays depending on
//! five such arrays, huge and escaping names, dependencies on another user's jobs, and
//! everyone listing everything at once, beside another user's running job.

use super::*;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{GetJobRequest, JobSpec, SubmitRequest};

/// The master's peak resident memory so far (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn held_array(
    argv: Vec<String>,
    env: &[(&str, String)],
    array: &str,
    dependency: &str,
) -> SubmitRequest {
    SubmitRequest {
        spec: Some(JobSpec {
            shape: "1x1".into(),
            argv,
            cwd: "/tmp".into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            hold: dependency.is_empty(),
            array: array.into(),
            dependency: dependency.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The mixes, beside a victim's job: it completes with every line, the master's
/// peak memory stays under 512 MiB, listings answer (in pages), nothing is blamed on a
/// node, and the refusals say what is wrong.
#[test]
fn a_hostile_array_and_dependency_mix_leaves_another_users_job_and_the_master_whole() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let victim = accounts.user("rv", &[]);
    let mallory = accounts.user("rm", &[]);
    let (mut c, _sockets) = shared_cluster(2, 2, |_| {});
    let master_pid = c.master_pid().expect("the master runs");
    let socket = std::path::PathBuf::from(c.master_addr().trim_start_matches("unix:"));

    // The victim's job: 60 numbered lines, a tenth of a second apart.
    let out = as_user(
        &c,
        &victim,
        "prun",
        &[
            "-n",
            "1x1",
            "--detach",
            "--",
            "sh",
            "-c",
            "for i in $(seq 1 60); do echo $i; sleep 0.1; done",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let victims = stdout(&out).trim().to_string();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut jobs = JobServiceClient::new(rt.block_on(accounts::channel_as(&socket, &mallory)));
    // A held array of 1,001 tasks, each the largest command line and environment allowed.
    let big_argv = vec![
        "sh".to_string(),
        "-c".into(),
        "true".into(),
        "a".repeat((256 << 10) - 64),
    ];
    let big_env = [("BIG", "e".repeat((1 << 20) - 64))];
    let t = std::time::Instant::now();
    let array = rt
        .block_on(jobs.submit(held_array(big_argv, &big_env, "0-1000", "")))
        .expect("the large held array is accepted")
        .into_inner();
    eprintln!(
        "large array: {} tasks accepted in {:?}",
        array.array_tasks,
        t.elapsed()
    );
    // Five held arrays of 1,001 tasks, and one that depends on all five.
    let small = || vec!["true".to_string()];
    let mut firsts = vec![];
    for _ in 0..5 {
        let a = rt
            .block_on(jobs.submit(held_array(small(), &[], "0-1000", "")))
            .expect("a held array")
            .into_inner();
        firsts.push(a.job.expect("a job").id);
    }
    let deps = format!(
        "afterok:{}",
        firsts
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(":")
    );
    let dependent = rt
        .block_on(jobs.submit(held_array(small(), &[], "0-1000", &deps)))
        .expect("the dependent array")
        .into_inner()
        .job
        .expect("a job")
        .id;
    // Names: 2.5 MB, and one that would move an admin's terminal.
    for (name, says) in [
        ("n".repeat(2_500_000), "1 to 256 bytes"),
        ("x\u{1b}]0;owned\u{7}".to_string(), "control characters"),
    ] {
        let mut req = held_array(small(), &[], "", "");
        req.spec.as_mut().unwrap().name = name;
        let e = rt.block_on(jobs.submit(req)).unwrap_err();
        assert!(e.message().contains(says), "{e:?}");
    }
    // A dependency on the victim's job: as if it did not exist.
    let e = rt
        .block_on(jobs.submit(held_array(small(), &[], "", &format!("afterok:{victims}"))))
        .unwrap_err();
    assert!(
        e.message()
            .contains(&format!("there is no job {victims} of yours")),
        "{e:?}"
    );
    // Past the bytes a user may have queued: refused, naming the limit.
    let mut refused = None;
    for _ in 0..100 {
        let r = rt.block_on(jobs.submit(held_array(
            vec!["sh".into(), "-c".into(), "true".into(), "b".repeat(200_000)],
            &[("E", "f".repeat(900_000))],
            "",
            "",
        )));
        if let Err(e) = r {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("the byte limit is reached");
    assert!(
        refused.message().contains("max_queued_bytes_per_user"),
        "{refused:?}"
    );

    // Everyone lists everything at once: 8 listings of the whole history, as root.
    let t = std::time::Instant::now();
    let listings: Vec<_> = (0..8)
        .map(|_| {
            let master = gang_e2e::MasterAddr(c.master_addr().to_string());
            std::thread::spawn(move || {
                gang_e2e::gangctl(
                    &master,
                    &["--output", "json", "jobs", "--all", "--limit", "100000"],
                )
            })
        })
        .collect();
    for l in listings {
        let out = l.join().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        // An array's waiting tasks are one line (`17_[2-1001]`) naming each task's job.
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let jobs: usize = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["task_job_ids"].as_array().map_or(1, Vec::len))
            .sum();
        assert!(jobs > 6000, "every job listed: {jobs}");
    }
    let listed_in = t.elapsed();
    // A dependent task's view answers at once, with why it waits.
    let t = std::time::Instant::now();
    let task = rt
        .block_on(jobs.get_job(GetJobRequest {
            job_id: dependent + 500,
        }))
        .expect("GetJob")
        .into_inner();
    let get_took = t.elapsed();
    assert!(
        task.pending_reason.contains("dependency afterok:"),
        "{task:?}"
    );

    // The victim's job ran through it all.
    let done = gang_e2e::wait_state(&c, victims.parse().unwrap(), "completed", LIMIT);
    assert_eq!(done["exit_code"], 0, "{done}");
    let lines = stdout(&gang_e2e::gangctl(&c, &["output", &victims]));
    let want: String = (1..=60).map(|i| format!("{i}\n")).collect();
    assert_eq!(lines, want);
    let rss_mib = peak_rss_kib(master_pid) / 1024;
    let batch_max_ms = gang_e2e::metric(&c, "gang_master_batch_max_microseconds", &[]) / 1000.0;
    eprintln!(
        "hostile mixes: master peak RSS {rss_mib} MiB, longest batch {batch_max_ms:.0} ms, \
         8 listings of every job {listed_in:?}, a dependent task's view {get_took:?}"
    );
    assert!(rss_mib < 512, "the master's peak RSS is {rss_mib} MiB");
    let log = gang_e2e::without_colours(&std::fs::read_to_string(c.master_log()).unwrap());
    assert!(!log.contains("node down"), "{log}");
    c.check_alive().unwrap();
    c.shutdown().unwrap();
}
