//! The real master, 16 real agents, real prun and gangctl, on loopback.

use std::collections::BTreeSet;
use std::time::Duration;

use gang_e2e::*;
use gang_proto::v1;

const T: Duration = Duration::from_secs(20);

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The user's path on a 4x4 mesh, one step after another on one cluster.
#[test]
fn prun_on_a_4x4_mesh() {
    let c = cluster(4, 4, &[]);

    // 16 ranks each print their own GANG_RANK (and the rest of the GANG_* environment).
    let out = prun(
        &c,
        &[
            "-n",
            "4x4",
            "--label",
            "--",
            "sh",
            "-c",
            "echo $GANG_RANK $GANG_SIZE $GANG_NODE $GANG_JOB_ID",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: BTreeSet<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 16, "{lines:?}");
    for r in 0..16u32 {
        let (x, y) = (r % 4, r / 4);
        let want = format!("{r}: {r} 16 {x},{y} ");
        assert!(
            lines.iter().any(|l| l.starts_with(&want)),
            "no line {want:?} in {lines:?}"
        );
    }

    // Exit codes: the first failing rank's code, or 128+signal.
    let out = prun(&c, &["-n", "1", "--", "sh", "-c", "exit 7"], None);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--",
            "sh",
            "-c",
            "[ $GANG_RANK = 3 ] && kill -9 $$; sleep 30",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    let out = prun(&c, &["-n", "2x1", "--", "true"], None);
    assert_eq!(out.status.code(), Some(0));

    // Stdin reaches rank 0 (and only rank 0).
    let out = prun(
        &c,
        &["-n", "2x1", "--label", "--", "sh", "-c", "cat"],
        Some(b"hello\nworld\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "0: hello\n0: world\n");

    // Ranks other than 0 end at once (cat of /dev/null), often before the master hears
    // they started; stdin must still reach rank 0, every time.
    for i in 0..20 {
        let data = format!("line {i}\n");
        let out = prun(
            &c,
            &["-n", "4x1", "--label", "--", "cat"],
            Some(data.as_bytes()),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out), format!("0: {data}"));
    }

    // A megabyte of output from each of 4 ranks arrives whole, stdout and stderr apart.
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--",
            "sh",
            "-c",
            "head -c 1000000 /dev/zero; echo err >&2",
        ],
        None,
    );
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 4_000_000);
    assert_eq!(stderr(&out), "err\nerr\nerr\nerr\n");

    // A time limit ends the job as a timeout with the reason; prun exits 124.
    let t0 = std::time::Instant::now();
    let out = prun(
        &c,
        &["-n", "2x1", "--time-limit", "1s", "-v", "--", "sleep", "30"],
        None,
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("time limit of 1 s reached"),
        "{}",
        stderr(&out)
    );
    assert!(t0.elapsed() < Duration::from_secs(10));

    // Bad input: clear errors, nothing hangs.
    let out = prun(&c, &["-n", "5x5", "--", "true"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("job asks 5x5 but the mesh is 4x4"),
        "{}",
        stderr(&out)
    );
    let out = prun(&c, &["-n", "17", "--", "true"], None);
    assert!(
        stderr(&out).contains("job asks 17 nodes but the mesh is 4x4"),
        "{}",
        stderr(&out)
    );
    let out = prun(&c, &["-n", "0x2", "--", "true"], None);
    assert!(
        !out.status.success() && stderr(&out).contains("at least one node"),
        "{}",
        stderr(&out)
    );
    let out = prun(&c, &["-n", "2x2"], None);
    assert!(!out.status.success());
    let out = prun(&c, &["-n", "2x2", "--", "/no/such/program"], None);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.contains("node (") && e.contains("No such file or directory"),
        "{e}"
    );
    let out = gangctl(&c, &["job", "999"]);
    assert!(
        !out.status.success() && stderr(&out).contains("unknown job 999"),
        "{}",
        stderr(&out)
    );

    // Two 2x2 jobs and one 4x2 share the mesh without overlap.
    let ids = [
        submit(&c, "2x2", &["sleep", "60"]),
        submit(&c, "2x2", &["sleep", "60"]),
        submit(&c, "4x2", &["sleep", "60"]),
    ];
    for id in ids {
        wait_state(&c, id, "running", T);
    }
    let m = gangctl_json(&c, &["slices"]).unwrap();
    assert_eq!(m["slices"].as_array().unwrap().len(), 1, "{m}");
    let p = m["slices"][0]["placements"].as_array().unwrap().clone();
    let held: BTreeSet<u64> = p.iter().map(|x| x["job"].as_u64().unwrap()).collect();
    assert_eq!(held, ids.into_iter().collect());
    let mut nodes = BTreeSet::new();
    for pl in &p {
        let (x, y, w, h) = ["x", "y", "w", "h"].map(|k| pl[k].as_u64().unwrap()).into();
        for yy in y..y + h {
            for xx in x..x + w {
                assert!(nodes.insert((xx, yy)), "node {xx},{yy} held twice: {m}");
            }
        }
    }
    assert_eq!(nodes.len(), 16);
    // The mesh is full: a further job waits, and starts when one ends.
    let queued = submit(&c, "1", &["true"]);
    assert_eq!(job(&c, queued)["state"], "queued");
    let out = gangctl(&c, &["cancel", &ids[0].to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_state(&c, ids[0], "cancelled", T);
    wait_state(&c, queued, "completed", T);
    for id in &ids[1..] {
        gangctl(&c, &["cancel", &id.to_string()]);
        wait_state(&c, *id, "cancelled", T);
    }

    c.shutdown().unwrap();
}

/// Cancel kills every rank, whether through gangctl or Ctrl-C in prun.
#[test]
fn cancel_kills_every_rank() {
    let c = cluster(4, 4, &[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let script = format!("echo $$ > {d}/pid.$GANG_RANK; exec sleep 600");
    let id = submit(&c, "4x4", &["sh", "-c", &script]);
    let pids = rank_pids(dir.path(), 16, T);
    assert!(pids.iter().all(|&p| alive(p)));
    let out = gangctl(&c, &["cancel", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j = wait_state(&c, id, "cancelled", T);
    assert_eq!(j["exit_code"], 143, "{j}");
    assert!(j["reason"].as_str().unwrap().contains("cancelled"), "{j}");
    wait_for(T, "every rank to be gone", || {
        pids.iter().all(|&p| !alive(p)).then_some(())
    });
    // And the mesh is free again.
    let m = gangctl_json(&c, &["slices"]).unwrap();
    assert_eq!(m["slices"].as_array().unwrap().len(), 0, "{m}");

    // Ctrl-C in prun: the job is cancelled and prun exits 130, as srun.
    for f in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let mut cmd = std::process::Command::new(bin_dir().join("prun"));
    gang_local::with_default_signals(&mut cmd);
    let mut child = cmd
        .args(["-n", "2x2", "--", "sh", "-c", &script])
        .env("GANG_MASTER", c.master_addr())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pids = rank_pids(dir.path(), 4, T);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = wait_for(T, "prun to exit after Ctrl-C", || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(130));
    wait_for(T, "every rank to be gone", || {
        pids.iter().all(|&p| !alive(p)).then_some(())
    });
    c.shutdown().unwrap();
}

/// A job whose working directory is missing fails with the node and the OS error (through
/// the gRPC API, as a portal would submit it).
#[test]
fn bad_working_directory_fails_the_job_with_the_node_named() {
    let c = cluster(2, 2, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let info = rt.block_on(async {
        let mut client = jobs_client(&c).await;
        let spec = v1::JobSpec {
            shape: "2x2".into(),
            argv: vec!["true".into()],
            cwd: "/no/such/dir".into(),
            ..Default::default()
        };
        // Who submits comes from the connection: the request states nothing.
        let req = v1::SubmitRequest {
            spec: Some(spec),
            ..Default::default()
        };
        client.submit(req).await.unwrap().into_inner().job.unwrap()
    });
    let j = wait_state(&c, info.id, "failed", T);
    let reason = j["reason"].as_str().unwrap();
    assert!(
        reason.contains("node (") && reason.contains("/no/such/dir"),
        "{reason}"
    );
    // Relative cwd and an empty command are refused at the edge.
    rt.block_on(async {
        let mut client = jobs_client(&c).await;
        for (argv, cwd, want) in [
            (vec!["true"], "rel/dir", "absolute path"),
            (vec![], "/", "the command is empty"),
        ] {
            let spec = v1::JobSpec {
                shape: "1".into(),
                argv: argv.into_iter().map(String::from).collect(),
                cwd: cwd.into(),
                ..Default::default()
            };
            let e = client
                .submit(v1::SubmitRequest {
                    spec: Some(spec),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains(want), "{}", e.message());
        }
    });
    c.shutdown().unwrap();
}

/// An agent that dies mid-job: the job fails with the reason, its submesh is freed.
#[test]
fn agent_death_fails_the_job_and_frees_its_nodes() {
    let mut c = cluster(2, 2, &[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let id = submit(
        &c,
        "2x2",
        &[
            "sh",
            "-c",
            &format!("echo $$ > {d}/pid.$GANG_RANK; exec sleep 600"),
        ],
    );
    let pids = rank_pids(dir.path(), 4, T);
    c.stop_agent(1, 1, nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let j = wait_state(&c, id, "failed", T);
    // The ranks write their pids before the agents' launch answers are back: an agent
    // killed in between fails the launch ("node (1,1): agent unreachable"), one killed
    // later is found silent ("node (1,1) lost"). Either way the job names the node.
    let reason = j["reason"].as_str().unwrap();
    assert!(
        reason.contains("node (1,1) lost") || reason.contains("node (1,1): agent unreachable"),
        "{j}"
    );
    wait_for(T, "every rank to be gone", || {
        pids.iter().all(|&p| !alive(p)).then_some(())
    });
    let m = gangctl_json(&c, &["slices"]).unwrap();
    assert_eq!(m["slices"].as_array().unwrap().len(), 0, "{m}");
    // The node is down (at once if its silence failed the job; within the node timeout
    // if the failed launch did): a 2x2 job waits; a 1x2 job runs beside it.
    wait_for(T, "node (1,1) down", || {
        let nodes = gangctl_json(&c, &["nodes"]).ok()?;
        let down = nodes["nodes"]
            .as_array()?
            .iter()
            .any(|n| n["x"] == 1 && n["y"] == 1 && n["state"] == "down");
        down.then_some(())
    });
    let waits = submit(&c, "2x2", &["true"]);
    let out = prun(&c, &["-n", "1x2", "--", "true"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(job(&c, waits)["state"], "queued");
    // The agent comes back: the waiting job runs.
    c.start_agent(1, 1).unwrap();
    wait_state(&c, waits, "completed", T);
    c.shutdown().unwrap();
}

/// The master killed while jobs run and wait: nothing accepted is lost; running jobs are
/// found again and their output and exit still reach the user.
#[test]
fn master_crash_loses_no_job() {
    let mut c = cluster(2, 2, &[]);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("go");
    let script = format!(
        "echo started $GANG_RANK; [ $GANG_RANK = 3 ] && exit 0; while [ ! -e {} ]; do sleep 0.05; done; echo done $GANG_RANK; [ $GANG_RANK = 0 ] && sleep 0.3 && exit 3; exit 0",
        gate.display()
    );
    let running = submit(&c, "2x2", &["sh", "-c", &script]);
    wait_state(&c, running, "running", T);
    // Rank 3 has ended before the crash: the restarted master must remember it.
    wait_for(T, "rank 3 to end", || {
        let text = c
            .dir()
            .join("state.db.output")
            .join(format!("{running}.out"));
        std::fs::read(text)
            .ok()?
            .windows(9)
            .any(|w| w == b"started 3")
            .then_some(())
    });
    wait_for(T, "rank 3 exit to be recorded", || {
        (job(&c, running)["ranks_done"] == 1).then_some(())
    });
    let queued = submit(&c, "2x1", &["sh", "-c", "echo queued-ran"]);
    assert_eq!(job(&c, queued)["state"], "queued");
    c.stop_master(nix::sys::signal::Signal::SIGKILL).unwrap();
    c.start_master().unwrap();
    c.wait_nodes_up(T).unwrap();
    let j = job(&c, running);
    assert_eq!(j["state"], "running", "{j}");
    assert_eq!(job(&c, queued)["state"], "queued");
    // Let the running job finish: its exit reaches the restarted master.
    std::fs::write(&gate, b"").unwrap();
    let j = wait_state(&c, running, "failed", T);
    assert_eq!(j["exit_code"], 3, "{j}");
    wait_state(&c, queued, "completed", T);
    // Output from before and after the crash is all there for a late attach.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (text, info) = rt.block_on(attach_all(&c, running));
    for r in 0..4 {
        assert!(text.contains(&format!("started {r}\n")), "{text}");
    }
    for r in 0..3 {
        assert!(text.contains(&format!("done {r}\n")), "{text}");
    }
    assert_eq!(info.exit_code, Some(3));

    // A cancel is durable before it is answered: the master dies right after it, the
    // agents carry out the kill, and the restarted master calls the job cancelled.
    let stubborn = submit(&c, "2x2", &["sh", "-c", "trap '' TERM; echo up; sleep 30"]);
    wait_state(&c, stubborn, "running", T);
    let out = gangctl(&c, &["cancel", &stubborn.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.stop_master(nix::sys::signal::Signal::SIGKILL).unwrap();
    c.start_master().unwrap();
    let j = wait_state(&c, stubborn, "cancelled", T);
    assert_eq!(j["reason"], "cancelled by root", "{j}");
    c.shutdown().unwrap();
}

/// What health and reflection name to clients.
const CLIENT_SERVICES: [&str; 6] = [
    "gang.v1.JobService",
    "gang.v1.AdminService",
    "gang.v1.AuthService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// gRPC health and reflection (what grpcurl uses), and Prometheus metrics.
#[test]
fn health_reflection_and_metrics_are_served() {
    let c = cluster(1, 1, &[]);
    let out = prun(&c, &["-n", "1", "--", "true"], None);
    assert!(out.status.success());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ch = c.channel().await.unwrap();
        // Every client service by name, and the server as a whole ("").
        let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
        for service in CLIENT_SERVICES.iter().chain(&[""]) {
            let r = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.to_string(),
                })
                .await
                .unwrap_or_else(|e| panic!("health of {service:?}: {e:?}"))
                .into_inner();
            assert_eq!(
                r.status,
                tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
                "{service:?}"
            );
        }
        use tonic_reflection::pb::v1::{
            ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        };
        let mut refl = ServerReflectionClient::new(ch.clone());
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut resp = refl
            .server_reflection_info(tokio_stream::once(req))
            .await
            .unwrap()
            .into_inner();
        let msg = resp.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
            panic!("unexpected reflection answer {msg:?}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        let mut want: Vec<&str> = CLIENT_SERVICES.to_vec();
        want.sort();
        // Only what a client may call: the agents' services are on the agent port.
        assert_eq!(names, want);

        // The same through v1alpha (older grpcurl, Python's grpcio-reflection).
        use tonic_reflection::pb::v1alpha as alpha;
        let mut refl = alpha::server_reflection_client::ServerReflectionClient::new(ch);
        let req = alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
            ),
        };
        let msg = refl
            .server_reflection_info(tokio_stream::once(req))
            .await
            .unwrap()
            .into_inner()
            .message()
            .await
            .unwrap()
            .unwrap();
        let Some(alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
            msg.message_response
        else {
            panic!("unexpected v1alpha reflection answer {msg:?}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        assert_eq!(names, want);

        // A gRPC client sent to the metrics port by mistake is told where it is.
        let metrics = format!("http://{}", c.metrics_addr().trim_start_matches("http://"));
        let ch = tonic::transport::Channel::from_shared(metrics)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let e = v1::job_service_client::JobServiceClient::new(ch)
            .get_job(v1::GetJobRequest { job_id: 1 })
            .await
            .expect_err("not a gRPC port");
        assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
        assert!(
            e.message().contains("Prometheus metrics port")
                && e.message().contains(c.master_addr()),
            "{e:?}"
        );
    });
    let text = http_get(c.metrics_addr(), "/");
    assert!(
        text.starts_with("HTTP/1.0 404") || text.starts_with("HTTP/1.1 404"),
        "{text}"
    );
    assert!(text.contains("metrics port (GET /metrics only)"), "{text}");
    let text = http_get(c.metrics_addr(), "/metrics");
    assert!(text.starts_with("HTTP/1."), "{text}");
    assert!(text.contains("gang_jobs_submitted_total 1"), "{text}");
    assert!(text.contains("gang_nodes_up 1"), "{text}");
    c.shutdown().unwrap();
}

/// The master runs without transparent huge pages (mimalloc's arenas held 59-75 MB of
/// them at 4,096 nodes); the agent and the programs it starts keep the host's setting,
/// which the flag would otherwise pass on to them.
#[test]
fn the_master_alone_turns_huge_pages_off() {
    let mut c = cluster(1, 1, &[]);
    let thp = |status: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix("THP_enabled:"))
            .map(|v| v.trim().to_string())
            .expect("the kernel reports THP_enabled (Linux 5.0 and later)")
    };
    let of = |pid: u32| thp(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap());
    let host = of(std::process::id());
    assert_eq!(of(c.master_pid().expect("the master runs")), "0");
    assert_eq!(of(c.agent_pid(0, 0).expect("the agent runs")), host);
    let out = prun(&c, &["-n", "1", "--", "cat", "/proc/self/status"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(thp(&stdout(&out)), host, "a rank keeps the host's setting");
    c.shutdown().unwrap();
}
