//! Remote identity: tokens and user certificates over the TLS port.

use super::*;

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
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let expired = key
        .issue(&a.name, a.uid, now_ms - 7_200_000, 3600)
        .expect("a token")
        .token;
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
