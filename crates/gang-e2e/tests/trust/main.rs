//! Who may do what, end to end: real Unix users against the master's socket, tokens and
//! certificates on its TLS port, certificates between the master and its agents, and an
//! agent cut off from the master in a network namespace. Runs as root (useradd, ip netns).

mod accounts;
mod netns;
mod tls;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use accounts::{Accounts, TestUser, channel_as, command_as, on_thread_as, output_within};
use gang_auth::PeerName;
use gang_auth::token::TokenKey;
use gang_auth::users::Identity;
use gang_e2e::{bin_dir, gangctl, gangctl_json, options, prun, rank_pids, wait_for, wait_state};
use gang_local::{LocalCluster, LocalClusterOptions, log_tail};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::agent_registry_client::AgentRegistryClient;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::node_agent_client::NodeAgentClient;
use gang_proto::v1::{
    AttachRequest, CancelRequest, GetJobRequest, HeartbeatRequest, JobSpec, JobState,
    LaunchRequest, ListJobsRequest, ListNodesRequest, NodeRequest, NodeState, RankExit,
    RegisterRequest, SignalRequest, SubmitRequest, WatchRequest, attach_response,
};
use netns::Netns;
use nix::sys::signal::Signal;
use tonic::Code;

/// Bounds a wait that normally takes well under a second.
const T: Duration = Duration::from_secs(20);
/// The longest any one command may take.
const LIMIT: Duration = Duration::from_secs(60);

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn cluster_with(w: u32, h: u32, change: impl FnOnce(&mut LocalClusterOptions)) -> LocalCluster {
    let mut opts = options(&[]);
    change(&mut opts);
    LocalCluster::start((w, h), opts).expect("local cluster starts")
}

/// A directory other users may traverse, for the master's socket (as /run/gang is): the
/// tests do not depend on the mode of the cluster's own directory (state, keys).
fn socket_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("gang-trust-sock-")
        .tempdir()
        .expect("temporary directory");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the socket directory");
    d
}

/// `prun` or `gangctl` run by `u` against `c`'s socket.
fn as_user(c: &LocalCluster, u: &TestUser, bin: &str, args: &[&str]) -> Output {
    let mut cmd = command_as(&bin_dir().join(bin), u);
    cmd.env("GANG_MASTER", c.master_addr()).args(args);
    output_within(&mut cmd, LIMIT)
}

/// `prun --detach` as `u`: the job id.
fn submit_as(c: &LocalCluster, u: &TestUser, argv: &[&str]) -> u64 {
    let out = as_user(
        c,
        u,
        "prun",
        &[&["-n", "1", "--detach", "--"], argv].concat(),
    );
    assert!(out.status.success(), "{}: {}", u.name, stderr(&out));
    stdout(&out)
        .trim()
        .parse()
        .expect("prun --detach prints the job id")
}

fn ids(jobs: &serde_json::Value) -> BTreeSet<u64> {
    jobs.as_array()
        .expect("a list of jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("an id"))
        .collect()
}

/// The jobs `gangctl jobs` lists for `u`.
fn jobs_as(c: &LocalCluster, u: &TestUser) -> BTreeSet<u64> {
    let out = as_user(c, u, "gangctl", &["--output", "json", "jobs", "--all"]);
    assert!(out.status.success(), "{}: {}", u.name, stderr(&out));
    ids(&serde_json::from_slice(&out.stdout).expect("JSON"))
}

fn assert_denied(e: &tonic::Status, want: &str) {
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(e.message(), want);
}

/// Users and network namespaces need root; without it a test says so and passes, as the
/// agent's root-only tests do.
fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root (useradd, ip netns)");
    }
    root
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

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
        stderr(&out).starts_with(&format!("gangctl: {admins_only}")),
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

/// Remote identity on the TLS port: a token from `gangctl token` (run by A on the
/// socket) or a user certificate makes the caller A, whatever their local uid; a
/// tampered or expired token, a node's certificate, or nothing, is refused.
#[test]
fn remote_identity_tokens_and_certificates() {
    if !root() {
        return;
    }
    let mut accounts = Accounts::new();
    let a = accounts.user("ra", &[]);
    let b = accounts.user("rb", &[]);
    let sockets = socket_dir();
    let c = cluster_with(2, 1, |o| {
        o.socket = Some(sockets.path().join("master.sock"))
    });
    let job_a = submit_as(&c, &a, &["sleep", "600"]);
    let job_b = submit_as(&c, &b, &["sleep", "600"]);
    let url = c.master_tls_addr().expect("the TLS port");
    let ca = c.ca();
    // An empty HOME: no saved token or client config is picked up by accident.
    let home = tempfile::tempdir().unwrap();
    // The remote client runs as root: over TLS its local uid says nothing; only what it
    // presents does.
    let remote = |creds: &[(&str, &Path)], token: Option<&str>, args: &[&str]| {
        let mut cmd = Command::new(bin_dir().join("gangctl"));
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home.path())
            .env("GANG_MASTER", &url)
            .env("GANG_CA", &ca)
            .envs(creds.iter().copied())
            .args(args);
        if let Some(t) = token {
            cmd.env("GANG_TOKEN", t);
        }
        output_within(&mut cmd, LIMIT)
    };
    let remote_ids = |out: Output| -> BTreeSet<u64> {
        assert!(out.status.success(), "{}", stderr(&out));
        ids(&serde_json::from_slice(&out.stdout).expect("JSON"))
    };
    let refused = |out: &Output, want: &str| {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
        assert_eq!(stderr(out), format!("gangctl: {want}\n"));
    };
    let not_owner = |job: u64, owner: &TestUser, caller: &TestUser, action: &str| {
        format!(
            "job {job} belongs to {}: {} may not {action} it",
            owner.name, caller.name
        )
    };

    let token_of = |u: &TestUser| {
        let out = as_user(&c, u, "gangctl", &["token"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let token_a = token_of(&a);
    let token_b = token_of(&b);
    let json_jobs = ["--output", "json", "jobs"];
    assert_eq!(
        remote_ids(remote(&[], Some(&token_a), &json_jobs)),
        [job_a].into()
    );
    assert_eq!(
        remote_ids(remote(&[], Some(&token_b), &json_jobs)),
        [job_b].into()
    );
    let out = remote(&[], Some(&token_a), &["job", &job_b.to_string()]);
    refused(&out, &not_owner(job_b, &b, &a, "see"));
    let out = remote(&[], Some(&token_a), &["cancel", &job_b.to_string()]);
    refused(&out, &not_owner(job_b, &b, &a, "cancel"));
    // A token does not buy another: tokens come from the socket only.
    let out = remote(&[], Some(&token_a), &["token"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("tokens are issued only on the master's Unix socket"),
        "{}",
        stderr(&out)
    );

    // Tampered: B's claims under A's signature, or A's signature changed in one place.
    let part = |t: &str, i: usize| t.split('.').nth(i).expect("a JWT").to_string();
    let spliced = format!(
        "{}.{}.{}",
        part(&token_a, 0),
        part(&token_b, 1),
        part(&token_a, 2)
    );
    let mut sig = part(&token_a, 2).into_bytes();
    let mid = sig.len() / 2;
    sig[mid] = if sig[mid] == b'A' { b'B' } else { b'A' };
    let flipped = format!(
        "{}.{}.{}",
        part(&token_a, 0),
        part(&token_a, 1),
        String::from_utf8(sig).unwrap()
    );
    for bad in [&spliced, &flipped] {
        let out = remote(&[], Some(bad), &["jobs"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).starts_with("gangctl: not authenticated: the token is not valid: "),
            "{}",
            stderr(&out)
        );
    }
    // Expired: signed with the master's own key, so its age is all that is wrong.
    let key = TokenKey::load_or_create(&c.dir().join("token.key")).expect("the master's key");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = key.issue(&Identity::of_name(&a.name).unwrap(), now - 7200, 3600);
    let out = remote(&[], Some(&expired), &["jobs"]);
    refused(
        &out,
        "not authenticated: the token expired; get a new one with `gangctl token` on a cluster host",
    );

    // A user certificate from `gangctl certs user A` (made by the admin, root here).
    let out = gangctl(
        &c,
        &[
            "certs",
            "user",
            &a.name,
            "--dir",
            c.pki().dir().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let cert_a = c.pki().files(&PeerName::User(a.name.clone()));
    let with_cert = [
        ("GANG_CERT", cert_a.cert.as_path()),
        ("GANG_KEY", &cert_a.key),
    ];
    assert_eq!(
        remote_ids(remote(&with_cert, None, &json_jobs)),
        [job_a].into()
    );
    let out = remote(&with_cert, None, &["cancel", &job_b.to_string()]);
    refused(&out, &not_owner(job_b, &b, &a, "cancel"));
    // A node's certificate is no user's.
    let node = c.pki().files(&PeerName::Node { x: 0, y: 0 });
    let with_node = [("GANG_CERT", node.cert.as_path()), ("GANG_KEY", &node.key)];
    let out = remote(&with_node, None, &["jobs"]);
    refused(
        &out,
        "not authenticated: the client certificate names node (0,0), not a user",
    );

    // The codes, as a portal sees them.
    let rt = runtime();
    rt.block_on(async {
        let list = |ch| async {
            JobServiceClient::new(ch)
                .list_jobs(ListJobsRequest::default())
                .await
        };
        for bad in [&spliced, &flipped, &expired] {
            let e = list(tls::remote(&url, &ca, Some(bad), None).await)
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        }
        let e = list(tls::remote(&url, &ca, None, Some(&node)).await)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        let e = list(tls::remote(&url, &ca, None, None).await)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        assert!(
            e.message().starts_with("not authenticated: no identity"),
            "{e:?}"
        );
        let jobs = list(tls::remote(&url, &ca, None, Some(&cert_a)).await)
            .await
            .unwrap()
            .into_inner()
            .jobs;
        assert_eq!(
            jobs.iter().map(|j| j.id).collect::<BTreeSet<_>>(),
            [job_a].into()
        );
    });

    // And A's certificate may steer A's own job from afar.
    let out = remote(&with_cert, None, &["cancel", &job_a.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let j = wait_state(&c, job_a, "cancelled", T);
    assert_eq!(j["reason"], format!("cancelled by {}", a.name), "{j}");
    c.shutdown().unwrap();
}

/// The nodes as the master lists them: state and address by coordinate.
fn nodes(c: &LocalCluster) -> BTreeMap<(u32, u32), (String, String)> {
    let v = gangctl_json(c, &["nodes"]).unwrap();
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let coord = |k: &str| n[k].as_u64().unwrap() as u32;
            (
                (coord("x"), coord("y")),
                (
                    n["state"].as_str().unwrap().to_string(),
                    n["address"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// A transport failure (the TLS handshake), as opposed to any answer of a service.
fn assert_handshake_failed(e: &tonic::Status) {
    assert!(
        matches!(
            e.code(),
            Code::Unknown | Code::Cancelled | Code::Unavailable
        ) && !e.message().contains("node (")
            && !e.message().contains("only agents"),
        "not a transport failure: {e:?}"
    );
}

/// Certificates between the master and its agents: an agent without one, or with
/// another node's, does not start; only the master may give an agent orders; a node's
/// certificate speaks for that node only on the master's agent port.
#[test]
fn agents_and_certificates() {
    let c = cluster_with(2, 1, |_| {});
    let pki = c.pki();
    let ca = pki.ca();
    let agents = c.agents_addr().expect("the agent port");
    let work = tempfile::tempdir().unwrap();
    let ready = work.path().join("agent.ready");
    let agent_cmd = |extra: &[&str]| {
        let mut cmd = Command::new(bin_dir().join("gang-agent"));
        cmd.env_remove("GANG_MASTER")
            .args(["--master", &format!("https://{agents}")])
            .args(["--x", "1", "--y", "0", "--listen", "127.0.0.1:0"])
            .arg("--ready-file")
            .arg(&ready)
            .args(extra);
        output_within(&mut cmd, LIMIT)
    };
    let before = nodes(&c);

    // No certificate: exit 2, saying what to bring.
    let out = agent_cmd(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("missing tls_ca, tls_cert, tls_key")
            && e.contains("gangctl certs init DIR --mesh WxH")
            && e.contains("DIR/nodes/node-1-0.pem"),
        "{e}"
    );
    // Node (0,0)'s certificate, for node (1,0): exit 1, naming both.
    let other = pki.files(&PeerName::Node { x: 0, y: 0 });
    let path = |p: &PathBuf| p.to_str().unwrap().to_string();
    let out = agent_cmd(&[
        "--tls-ca",
        &path(&other.ca),
        "--tls-cert",
        &path(&other.cert),
        "--tls-key",
        &path(&other.key),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("node (1,0): refusing to start: ")
            && e.contains(&format!(
                "{} is the certificate of node (0,0), not of node (1,0)",
                other.cert.display()
            )),
        "{e}"
    );
    assert!(!ready.exists(), "it never served");

    let agent_10: SocketAddr = before[&(1, 0)].1.parse().expect("node (1,0)'s address");
    let user = pki
        .issue(&PeerName::User("mallory".into()), 1)
        .expect("a user certificate");
    let mark = work.path().join("launched");
    let launch = LaunchRequest {
        job_id: 999,
        rank: 0,
        size: 1,
        argv: vec!["touch".into(), path(&mark)],
        cwd: "/".into(),
        env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
        ..Default::default()
    };
    let rt = runtime();
    rt.block_on(async {
        // Certificates of the cluster's CA, but not the master's: refused by the agent,
        // even its own node's.
        for (who, named) in [
            (pki.files(&PeerName::Node { x: 0, y: 0 }), "node (0,0)"),
            (pki.files(&PeerName::Node { x: 1, y: 0 }), "node (1,0)"),
            (user.clone(), "user mallory"),
        ] {
            let mut client =
                NodeAgentClient::new(tls::mtls(agent_10, &ca, Some(&who), "node-1-0.gang"));
            let want = format!(
                "node (1,0): only the master may call an agent; the caller's certificate names {named}"
            );
            let e = client.launch(launch.clone()).await.unwrap_err();
            assert_denied(&e, &want);
            let e = client
                .signal(SignalRequest {
                    job_id: 999,
                    grace_ms: 0,
                })
                .await
                .unwrap_err();
            assert_denied(&e, &want);
        }
        // No certificate: the handshake fails, no service is reached.
        let e = NodeAgentClient::new(tls::mtls(agent_10, &ca, None, "node-1-0.gang"))
            .launch(launch.clone())
            .await
            .unwrap_err();
        assert_handshake_failed(&e);

        // The master's agent port: node (0,0)'s certificate cannot speak for (1,0).
        let node_00 = pki.files(&PeerName::Node { x: 0, y: 0 });
        let mut registry =
            AgentRegistryClient::new(tls::mtls(agents, &ca, Some(&node_00), "master.gang"));
        let want = "the certificate of node (0,0) cannot speak for node (1,0)";
        let e = registry
            .register(RegisterRequest {
                x: 1,
                y: 0,
                address: "127.0.0.1:9".into(),
                running: vec![],
            })
            .await
            .unwrap_err();
        assert_denied(&e, want);
        let e = registry
            .heartbeat(HeartbeatRequest {
                x: 1,
                y: 0,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_denied(&e, want);
        let e = registry
            .report_exit(RankExit {
                job_id: 999,
                x: 1,
                y: 0,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_denied(&e, want);
        // A user's certificate is no agent's; no certificate gets no further than the
        // handshake.
        let e = AgentRegistryClient::new(tls::mtls(agents, &ca, Some(&user), "master.gang"))
            .heartbeat(HeartbeatRequest::default())
            .await
            .unwrap_err();
        assert_denied(
            &e,
            "only agents may call the registry; the certificate names user mallory",
        );
        let e = AgentRegistryClient::new(tls::mtls(agents, &ca, None, "master.gang"))
            .heartbeat(HeartbeatRequest::default())
            .await
            .unwrap_err();
        assert_handshake_failed(&e);
    });
    assert!(!mark.exists(), "nothing was launched");
    // Node (1,0) is still up at its own address, and runs jobs.
    assert_eq!(nodes(&c), before);
    let out = prun(&c, &["-n", "2x1", "--", "true"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    c.shutdown().unwrap();
}

/// Gone, or a zombie nobody reaped yet: not running either way.
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

fn net_ns_inode(pid: i32) -> u64 {
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .expect("the rank's network namespace")
        .ino()
}

/// A log line without its terminal colour codes (`ESC [ ... m`: the master colours its
/// log even into a file).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// When the first log line holding every one of `parts` was written: seconds since the
/// start of its day (both daemons log UTC timestamps from the same host clock).
fn logged_at(log: &str, parts: &[&str]) -> Option<f64> {
    let line = log
        .lines()
        .map(without_colours)
        .find(|l| parts.iter().all(|p| l.contains(p)))?;
    // 2026-01-02T03:04:05.678901Z ...
    let time = line.split_whitespace().next()?.split_once('T')?.1;
    let mut hms = time.trim_end_matches('Z').split(':');
    let (h, m, s): (f64, f64, f64) = (
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Poll `f` every 10 ms until it returns `Some`, for at most `timeout`.
fn until<V>(timeout: Duration, mut f: impl FnMut() -> Option<V>) -> Option<V> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Node (1,0)'s agent runs in a network namespace, joined to the host by a veth pair;
/// cutting the link mid-job: the master counts the node lost and fails the job naming it,
/// the agent's fence stops the rank there; mending it: the agent registers again, the
/// node is up, and a new job runs on it.
#[test]
fn an_agent_cut_off_in_a_network_namespace() {
    if !root() {
        return;
    }
    let ns = Netns::create();
    // The master's agent port on every address, so the namespace reaches it across the
    // veth; the other agents still dial loopback.
    let mut c = cluster_with(2, 1, |o| {
        o.agents_listen = Some(Ipv4Addr::UNSPECIFIED.into());
    });
    let port = c.agents_addr().expect("the agent port").port();
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("agent-1-0-netns.log");

    c.stop_agent(1, 0, Signal::SIGTERM).unwrap();
    let tls = c.pki().files(&PeerName::Node { x: 1, y: 0 });
    let args: Vec<String> = [
        "--master",
        &format!("https://{}:{port}", ns.host_ip),
        "--x",
        "1",
        "--y",
        "0",
        "--listen",
        &format!("{}:0", ns.ns_ip),
        "--tls-ca",
        tls.ca.to_str().unwrap(),
        "--tls-cert",
        tls.cert.to_str().unwrap(),
        "--tls-key",
        tls.key.to_str().unwrap(),
        "--allow-root",
        "--kill-grace-ms",
        "500",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut agent = ns.spawn(&bin_dir().join("gang-agent"), &args, &log);
    let ns_prefix = format!("{}:", ns.ns_ip);
    let rt = runtime();
    let ch = rt.block_on(c.channel()).expect("the master's socket");
    let node_10 = || {
        rt.block_on(async {
            AdminServiceClient::new(ch.clone())
                .list_nodes(ListNodesRequest {})
                .await
                .expect("ListNodes")
                .into_inner()
                .nodes
                .into_iter()
                .find(|n| (n.x, n.y) == (1, 0))
                .expect("node (1,0) is listed")
        })
    };
    let moved = until(T, || {
        let n = node_10();
        (n.state() == NodeState::Up && n.address.starts_with(&ns_prefix)).then_some(())
    });
    assert!(
        moved.is_some(),
        "node (1,0) not up from the namespace: {:?}; agent log:\n{}",
        node_10(),
        log_tail(&log, 30)
    );

    // A job across both nodes; the rank on (1,0) runs inside the namespace.
    let ranks = tempfile::tempdir().unwrap();
    let d = ranks.path().display();
    let script = format!(
        "echo $GANG_NODE > {d}/node.$GANG_RANK; echo $$ > {d}/pid.$GANG_RANK; exec sleep 600"
    );
    let job = gang_e2e::submit(&c, "2x1", &["sh", "-c", &script]);
    let pids = rank_pids(ranks.path(), 2, T);
    let node_of = |r: usize| {
        std::fs::read_to_string(ranks.path().join(format!("node.{r}")))
            .unwrap()
            .trim()
            .to_string()
    };
    let cut = (0..2)
        .find(|&r| node_of(r) == "1,0")
        .expect("a rank on (1,0)");
    let (cut_pid, other_pid) = (pids[cut], pids[1 - cut]);
    assert_eq!(net_ns_inode(cut_pid), ns.inode());
    assert_ne!(net_ns_inode(other_pid), ns.inode());
    wait_state(&c, job, "running", T);

    // Cut the cable.
    let cut_at = Instant::now();
    ns.set_link(false);
    let (mut down, mut failed, mut stopped) = (None, None, None);
    let done = until(T, || {
        let t = cut_at.elapsed();
        if down.is_none() && node_10().state() == NodeState::Down {
            down = Some(t);
        }
        if failed.is_none() {
            let j = rt.block_on(async {
                JobServiceClient::new(ch.clone())
                    .get_job(GetJobRequest { job_id: job })
                    .await
                    .expect("GetJob")
                    .into_inner()
            });
            if j.state() == JobState::Failed {
                failed = Some((t, j.reason));
            }
        }
        if stopped.is_none() && gone(cut_pid) {
            stopped = Some(t);
        }
        (down.is_some() && failed.is_some() && stopped.is_some()).then_some(())
    });
    assert!(
        done.is_some(),
        "after the cut: node down {down:?}, job failed {failed:?}, rank stopped {stopped:?}; agent log:\n{}",
        log_tail(&log, 30)
    );
    let (down, (failed, reason), stopped) = (down.unwrap(), failed.unwrap(), stopped.unwrap());
    assert!(
        reason.starts_with("node (1,0) lost"),
        "the reason names the node: {reason}"
    );
    wait_for(T, "the rank on (0,0) to be stopped by the master", || {
        gone(other_pid).then_some(())
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("stopping their ranks here so that none runs unsupervised"),
        "the fence fell: {text}"
    );
    assert!(agent.running(), "the cut agent keeps trying");

    // Mend it.
    let mended_at = Instant::now();
    ns.set_link(true);
    let rejoined = until(Duration::from_secs(30), || {
        let n = node_10();
        (n.state() == NodeState::Up).then(|| (mended_at.elapsed(), n))
    });
    let rejoined = rejoined.unwrap_or_else(|| {
        panic!(
            "node (1,0) not back within 30 s; agent log:\n{}",
            log_tail(&log, 30)
        )
    });
    let (rejoined, n) = rejoined;
    assert!(
        n.address.starts_with(&ns_prefix) && n.jobs.is_empty(),
        "{n:?}"
    );
    let registrations = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("registered with the master")
            .count()
    };
    // The master counts the node up as it answers; the agent logs the answer after.
    let logged = until(T, || (registrations() >= 2).then_some(()));
    assert!(logged.is_some(), "{}", log_tail(&log, 30));
    let out = prun(
        &c,
        &["-n", "2x1", "--label", "--", "sh", "-c", "echo $GANG_NODE"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: BTreeSet<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines, ["0: 0,0".to_string(), "1: 1,0".to_string()].into());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        registrations(),
        2,
        "registered once at the start and once after the cut: {text}"
    );
    assert!(!text.contains(" ERROR "), "{text}");

    // Seen from the logs (one host, one clock): how long after the master gave up on the
    // node its agent's fence fell (negative: before).
    let master_text = std::fs::read_to_string(c.master_log()).unwrap();
    let gave_up = logged_at(&master_text, &["agent silent: node down", "node=1,0"]);
    let fenced = logged_at(&text, &["stopping their ranks here"]);
    let fence_after_ms = gave_up
        .zip(fenced)
        .map(|(m, a)| format!("{:+.0} ms", (a - m) * 1000.0))
        .unwrap_or_else(|| "?".into());
    eprintln!(
        "cut link: node (1,0) down after {} ms, job failed after {} ms, its rank there stopped after {} ms (the fence fell {fence_after_ms} after the master gave up, by the logs); mended: node up again after {} ms",
        down.as_millis(),
        failed.as_millis(),
        stopped.as_millis(),
        rejoined.as_millis()
    );
    // Within the node timeout (1.5 s) and the fence (+ one heartbeat, 100 ms) and
    // the kill grace (500 ms), with room for a loaded machine.
    assert!(down < Duration::from_secs(6), "{down:?}");
    assert!(stopped < Duration::from_secs(8), "{stopped:?}");
    drop(agent);
    c.shutdown().unwrap();
}
