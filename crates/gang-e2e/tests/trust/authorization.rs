//! Who may do what, with real users: the authorization matrix.

use super::*;

/// Two real users (A also in an extra group) on the master's socket: each sees and
/// steers their own jobs only, whatever the request claims; root, an admin, sees and
/// cancels both; a job of A's runs with A's uid, gid and groups.
#[test]
fn authorization_matrix_with_real_users() {
    if !root() {
        return;
    }
    // Declared first, dropped last: after the cluster and the ranks running as them.
    let mut accounts = Accounts::new();
    let team = accounts.group("mg");
    let a = accounts.user("ma", &[&team]);
    let b = accounts.user("mb", &[]);
    assert!(a.groups.contains(&team.gid) && !b.groups.contains(&team.gid));
    let sockets = socket_dir();
    let socket = sockets.path().join("master.sock");
    let c = cluster_with(2, 1, |o| o.socket = Some(socket.clone()));
    assert_eq!(c.master_addr(), format!("unix:{}", socket.display()));
    let rt = runtime();

    // A job of A's runs as A on every node: uid, primary group, and all of A's groups,
    // the extra one included (`id -G` prints the effective gid first).
    let out = as_user(
        &c,
        &a,
        "prun",
        &[
            "-n",
            "2x1",
            "--label",
            "--",
            "sh",
            "-c",
            "id -u; id -g; id -G",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for rank in 0..2 {
        let prefix = format!("{rank}: ");
        let lines: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], a.uid.to_string(), "{text}");
        assert_eq!(lines[1], a.gid.to_string(), "{text}");
        let groups: Vec<u32> = lines[2]
            .split_whitespace()
            .map(|g| g.parse().expect("a gid"))
            .collect();
        assert_eq!(groups.first(), Some(&a.gid), "{text}");
        let got: BTreeSet<u32> = groups.into_iter().collect();
        assert_eq!(got, a.groups.iter().copied().collect(), "{text}");
        assert!(got.contains(&team.gid), "{text}");
    }

    // A's job and B's job, a node each.
    let job_a = submit_as(&c, &a, &["sh", "-c", "echo output of A; exec sleep 600"]);
    let job_b = submit_as(&c, &b, &["sleep", "600"]);
    wait_state(&c, job_a, "running", T);
    wait_state(&c, job_b, "running", T);
    let owner = |j: &serde_json::Value| (j["user"].clone(), j["uid"].clone());
    let j = gangctl_json(&c, &["job", &job_a.to_string()]).unwrap();
    assert_eq!(owner(&j), (a.name.clone().into(), a.uid.into()), "{j}");

    // Each lists their own jobs only (the `id` job above included for A).
    let mine = jobs_as(&c, &a);
    assert!(mine.contains(&job_a) && !mine.contains(&job_b), "{mine:?}");
    assert_eq!(jobs_as(&c, &b), [job_b].into());
    let out = as_user(&c, &a, "gangctl", &["job", &job_a.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));

    // B's gangctl is refused, naming the owner; so is A's drain (admins only).
    let refusal = |action: &str| {
        format!(
            "job {job_a} belongs to {}: {} may not {action} it",
            a.name, b.name
        )
    };
    let out = as_user(&c, &b, "gangctl", &["cancel", &job_a.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), format!("gangctl: {}\n", refusal("cancel")));
    let out = as_user(&c, &b, "gangctl", &["job", &job_a.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), format!("gangctl: {}\n", refusal("see")));
    let out = as_user(&c, &a, "gangctl", &["drain", "0,0"]);
    assert_eq!(out.status.code(), Some(1));
    let admins_only = format!("{} may not drain nodes: admins only", a.name);
    assert!(
        stderr(&out).starts_with(&format!("gangctl: node 0,0: {admins_only}")),
        "{}",
        stderr(&out)
    );

    // B through the API, on the socket as B: every way at A's job is PERMISSION_DENIED
    // naming A; a request stating another identity is refused.
    rt.block_on(async {
        let ch = channel_as(&socket, &b).await;
        let mut jobs = JobServiceClient::new(ch.clone());
        let e = jobs
            .cancel(CancelRequest {
                job_id: job_a,
                uid: 0,
            })
            .await
            .unwrap_err();
        assert_denied(&e, &refusal("cancel"));
        let e = jobs
            .get_job(GetJobRequest { job_id: job_a })
            .await
            .unwrap_err();
        assert_denied(&e, &refusal("see"));
        let e = jobs
            .watch(WatchRequest { job_id: job_a })
            .await
            .expect_err("watching A's job is refused");
        assert_denied(&e, &refusal("see"));
        let e = jobs
            .attach(tokio_stream::once(AttachRequest {
                job_id: job_a,
                stdin: b"from B\n".to_vec(),
                stdin_eof: true,
                no_follow: false,
            }))
            .await
            .expect_err("attaching to A's job is refused");
        assert_denied(&e, &refusal("see"));
        let listed = jobs
            .list_jobs(ListJobsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .jobs;
        assert_eq!(
            listed.iter().map(|j| j.id).collect::<BTreeSet<_>>(),
            [job_b].into()
        );

        let spec = JobSpec {
            shape: "1".into(),
            argv: vec!["true".into()],
            cwd: "/".into(),
            ..Default::default()
        };
        let actual = format!("{} (uid {}, gid {})", b.name, b.uid, b.gid);
        let forged = |field: &str, stated: &str| {
            format!(
                "the request says {field} {stated} but the caller is {actual}; identity comes from the connection"
            )
        };
        for (req, field, stated) in [
            (
                SubmitRequest {
                    uid: a.uid,
                    ..Default::default()
                },
                "uid",
                a.uid.to_string(),
            ),
            (
                SubmitRequest {
                    user: a.name.clone(),
                    ..Default::default()
                },
                "user",
                a.name.clone(),
            ),
            // A group B is not in.
            (
                SubmitRequest {
                    gid: team.gid,
                    ..Default::default()
                },
                "gid",
                team.gid.to_string(),
            ),
        ] {
            let req = SubmitRequest {
                spec: Some(spec.clone()),
                ..req
            };
            let e = jobs.submit(req).await.unwrap_err();
            assert_denied(&e, &forged(field, &stated));
        }
        // Even on B's own job, a cancel stating A's uid is refused.
        let e = jobs
            .cancel(CancelRequest {
                job_id: job_b,
                uid: a.uid,
            })
            .await
            .unwrap_err();
        assert_denied(&e, &forged("uid", &a.uid.to_string()));

        let mut admin = AdminServiceClient::new(ch);
        let e = admin
            .drain(NodeRequest { x: 0, y: 0 })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(
            e.message()
                .starts_with(&format!("{} may not drain nodes: admins only", b.name)),
            "{e:?}"
        );

        // A, on the socket as A, attaches to their own job and gets its output.
        let mut jobs = JobServiceClient::new(channel_as(&socket, &a).await);
        let mut stream = jobs
            .attach(tokio_stream::once(AttachRequest {
                job_id: job_a,
                stdin: vec![],
                stdin_eof: true,
                no_follow: false,
            }))
            .await
            .expect("A attaches to their own job")
            .into_inner();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("output of A\n") {
            let msg = tokio::time::timeout(T, stream.message())
                .await
                .expect("A's output within the deadline")
                .expect("the attach stream")
                .expect("output before the stream ends");
            if let Some(attach_response::Event::Output(o)) = msg.event {
                seen.extend_from_slice(&o.data);
            }
        }
    });
    // Nor can B read A's job behind the master's back: its record (command line,
    // environment, directory) in the state database and its output log are the master's.
    let output_log = c.dir().join(format!("state.db.output/{job_a}.out"));
    assert!(output_log.exists());
    for file in ["state.db", "state.db-wal", "state.db-shm"]
        .map(|f| c.dir().join(f))
        .into_iter()
        .chain([output_log])
        .filter(|p| p.exists())
    {
        let p = file.clone();
        let read = on_thread_as(&b, move || std::fs::read(&p));
        assert_eq!(
            read.as_ref().map_err(std::io::Error::kind).err(),
            Some(std::io::ErrorKind::PermissionDenied),
            "{} could read {}",
            b.name,
            file.display()
        );
    }
    let nodes = gangctl_json(&c, &["nodes"]).unwrap();
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["state"] == "up"),
        "nobody drained a node: {nodes}"
    );

    // B watches every job while root cancels A's job, then B's: B hears of B's only.
    let mut watch_b = rt.block_on(async {
        JobServiceClient::new(channel_as(&socket, &b).await)
            .watch(WatchRequest { job_id: 0 })
            .await
            .unwrap()
            .into_inner()
    });
    // Root is an admin: it sees both jobs, and may cancel both.
    let all = ids(&gangctl_json(&c, &["jobs"]).unwrap());
    assert!(all.contains(&job_a) && all.contains(&job_b), "{all:?}");
    for id in [job_a, job_b] {
        let out = gangctl(&c, &["cancel", &id.to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let j = wait_state(&c, id, "cancelled", T);
        assert_eq!(j["reason"], "cancelled by root", "{j}");
    }
    rt.block_on(async {
        loop {
            let ev = tokio::time::timeout(T, watch_b.message())
                .await
                .expect("an event within the deadline")
                .expect("the watch stream")
                .expect("the watch goes on");
            let job = ev.job.expect("an event names its job");
            assert_eq!(job.id, job_b, "B was told of another's job: {job:?}");
            if job.state() == JobState::Cancelled {
                break;
            }
        }
    });
    drop(watch_b);
    c.shutdown().unwrap();
}
