//! The gRPC API as a portal uses it, on a real cluster: Watch's snapshot and end, Cancel's
//! answers (and `gangctl cancel`'s), and the environment of a job submitted with none.

use std::time::Duration;

use gang_e2e::*;
use gang_proto::v1;
use tonic::Code;

/// Generous: the test machine is shared and loaded.
const T: Duration = Duration::from_secs(60);

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The next event of a watch, within `T`; `None` when the stream ended.
async fn next(s: &mut tonic::Streaming<v1::JobEvent>) -> Option<v1::JobInfo> {
    tokio::time::timeout(T, s.message())
        .await
        .expect("a watch event within the deadline")
        .expect("the watch stream is healthy")
        .map(|e| e.job.expect("an event names its job"))
}

/// The next event with its snapshot flag.
async fn next_event(s: &mut tonic::Streaming<v1::JobEvent>) -> Option<v1::JobEvent> {
    tokio::time::timeout(T, s.message())
        .await
        .expect("a watch event within the deadline")
        .expect("the watch stream is healthy")
}

#[test]
fn watch_starts_with_a_snapshot_and_cancel_says_what_it_did() {
    let c = cluster(1, 1, &[]);
    let running = submit(&c, "1", &["sleep", "600"]);
    wait_state(&c, running, "running", T);
    // The only node is taken: this one waits.
    let queued = submit(&c, "1", &["true"]);
    assert_eq!(job(&c, queued)["state"], "queued");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut jobs = jobs_client(&c).await;

        // A watch of one job opens with its current state, at once.
        let mut one = jobs
            .watch(v1::WatchRequest { job_id: running })
            .await
            .unwrap()
            .into_inner();
        let first = next_event(&mut one).await.expect("a snapshot");
        assert!(first.snapshot, "{first:?}");
        let info = first.job.unwrap();
        assert_eq!((info.id, info.state()), (running, v1::JobState::Running));

        // A watch of every job opens with each live one, oldest first.
        let mut all = jobs
            .watch(v1::WatchRequest { job_id: 0 })
            .await
            .unwrap()
            .into_inner();
        for want in [
            (running, v1::JobState::Running),
            (queued, v1::JobState::Queued),
        ] {
            let e = next_event(&mut all).await.expect("a snapshot");
            assert!(e.snapshot, "{e:?}");
            let j = e.job.unwrap();
            assert_eq!((j.id, j.state()), want);
        }

        // An unknown job is NOT_FOUND, as GetJob and Attach say.
        let e = jobs
            .watch(v1::WatchRequest { job_id: 9999 })
            .await
            .expect_err("no such job");
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert_eq!(e.message(), "unknown job 9999");

        // Cancelling a queued job ends it at once; the reply says so.
        let r = jobs
            .cancel(v1::CancelRequest {
                job_id: queued,
                uid: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap();
        assert_eq!(r.state(), v1::JobState::Cancelled, "{r:?}");

        // A running one: the master holds it running until its ranks are gone.
        let r = jobs
            .cancel(v1::CancelRequest {
                job_id: running,
                uid: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap();
        assert_eq!(r.state(), v1::JobState::Running, "{r:?}");
        assert!(r.reason.contains("its ranks are being stopped"), "{r:?}");

        // The one-job watch sees it end, and then ends.
        let last = loop {
            let j = next(&mut one).await.expect("events until the job ends");
            assert_eq!(j.id, running);
            if j.state() != v1::JobState::Running {
                break j;
            }
        };
        assert_eq!(last.state(), v1::JobState::Cancelled, "{last:?}");
        assert!(
            next(&mut one).await.is_none(),
            "the watch ends with its job"
        );

        // A finished job's watch: its snapshot, then the end.
        let mut done = jobs
            .watch(v1::WatchRequest { job_id: queued })
            .await
            .unwrap()
            .into_inner();
        let e = next_event(&mut done).await.expect("a snapshot");
        assert!(e.snapshot);
        assert_eq!(e.job.unwrap().state(), v1::JobState::Cancelled);
        assert!(next(&mut done).await.is_none());

        // Cancelling what has ended is refused, naming how it ended.
        let e = jobs
            .cancel(v1::CancelRequest {
                job_id: running,
                uid: 0,
            })
            .await
            .expect_err("already cancelled");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert_eq!(e.message(), format!("job {running} already cancelled"));
    });

    // gangctl: a refusal is an error (exit 1), in text and in JSON.
    let out = gangctl(&c, &["cancel", &queued.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!("gangctl: job {queued} already cancelled\n")
    );
    let out = gangctl(&c, &["--output", "json", "cancel", &queued.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e: serde_json::Value = serde_json::from_str(&stderr(&out)).expect("a JSON error");
    assert_eq!(e["code"], "FAILED_PRECONDITION", "{e}");
    assert_eq!(
        e["message"],
        format!("job {queued} already cancelled"),
        "{e}"
    );
    let out = gangctl(&c, &["--output", "json", "job", "9999"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e: serde_json::Value = serde_json::from_str(&stderr(&out)).expect("a JSON error");
    assert_eq!(e["code"], "NOT_FOUND", "{e}");
    assert_eq!(e["message"], "unknown job 9999", "{e}");

    // And one that was accepted prints what happened to each job.
    let ended = submit(&c, "1", &["true"]);
    let holding = submit(&c, "1", &["sleep", "600"]);
    wait_state(&c, ended, "completed", T);
    wait_state(&c, holding, "running", T);
    let waiting = submit(&c, "1", &["true"]);
    // The waiting job first: cancelled second, it could start on the node the first one
    // frees in between (seen on a loaded host).
    let out = gangctl(&c, &["cancel", &waiting.to_string(), &holding.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("cancelled {waiting}\ncancelling {holding}: its ranks are being stopped\n")
    );
    c.shutdown().unwrap();
}

/// A job submitted through the API with no environment gets a login-like one; one with
/// an environment runs with it as given (and the account variables).
#[test]
fn api_jobs_without_an_environment_get_a_default_one() {
    let c = cluster(1, 1, &[]);
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's user has a password entry");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut jobs = jobs_client(&c).await;
        let run = |env: &[(&str, &str)]| v1::SubmitRequest {
            spec: Some(v1::JobSpec {
                shape: "1".into(),
                argv: vec!["env".into()],
                cwd: "/".into(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = jobs
            .submit(run(&[]))
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap()
            .id;
        let (out, info) = attach_all(&c, id).await;
        assert_eq!(info.state(), v1::JobState::Completed, "{info:?}\n{out}");
        let home = format!("HOME={}", me.dir.display());
        let user = format!("USER={}", me.name);
        let logname = format!("LOGNAME={}", me.name);
        let shell = format!("SHELL={}", me.shell.display());
        for want in [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG=C.UTF-8",
            &home,
            &user,
            &logname,
            &shell,
        ] {
            assert!(out.lines().any(|l| l == want), "no {want} in:\n{out}");
        }

        let id = jobs
            .submit(run(&[("FOO", "bar"), ("PATH", "/usr/bin:/bin")]))
            .await
            .unwrap()
            .into_inner()
            .job
            .unwrap()
            .id;
        let (out, _) = attach_all(&c, id).await;
        assert!(out.lines().any(|l| l == "FOO=bar"), "{out}");
        assert!(out.lines().any(|l| l == "PATH=/usr/bin:/bin"), "{out}");
        assert!(out.lines().any(|l| l == user), "{out}");
        assert!(!out.lines().any(|l| l.starts_with("LANG=")), "{out}");
    });
    c.shutdown().unwrap();
}
