//! Agents and their certificates: a node speaks only for itself.

use super::*;

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
        let node_00 = pki.files(&PeerName::Node { x: 0, y: 0 });
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

        // NodeRelay: other nodes may call it (they forward the master's orders), users may
        // not; and an order is taken only with the master's signature, which no node can
        // make: not with a made-up one, nor with a key of its own.
        let mut order_launch = launch.clone();
        order_launch.part = Some(gang_proto::v1::Submesh {
            x: 1,
            y: 0,
            w: 1,
            h: 1,
        });
        let order = RelayOrder {
            work: Some(relay_order::Work::Launch(order_launch)),
            expires_ns: i64::MAX,
            nodes: vec![1 << 16], // node (1,0), packed x << 16 | y
            table_of: vec![],
        }
        .encode_to_vec();
        let node_key = std::fs::read(&node_00.key).unwrap();
        for signature in [
            vec![0u8; 64],
            gang_auth::order_key::OrderSigner::from_master_key(&node_key).sign(&order),
        ] {
            let forged = RelayRequest {
                order: order.clone(),
                signature,
                first: 0,
                end: 1,
                addresses: vec![agent_10.to_string()],
                width: 2,
                hop_timeout_ms: 1000,
                parent_address: String::new(),
            };
            let e = NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&node_00), "node-1-0.gang"))
                .relay(forged.clone())
                .await
                .unwrap_err();
            assert_denied(&e, "node (1,0): the relay order is not signed by the master");
            let e = NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&user), "node-1-0.gang"))
                .relay(forged)
                .await
                .unwrap_err();
            assert_denied(
                &e,
                "node (1,0): only the master and other nodes may relay; the caller's certificate names user mallory",
            );
        }
        // A fence part (NodeRelay.FenceUp) is taken only from a node, and only for a job
        // with a rank here (and, unit-tested in fence_tree, from a child of it in the
        // job's tree, on the node that child runs on).
        let part = FenceUpRequest {
            job_id: 999,
            epoch: 1,
            rank: 1,
            puts: [("stolen".to_string(), "x".to_string())].into(),
            known_epoch: 0,
        };
        let e = NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&user), "node-1-0.gang"))
            .fence_up(part.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let e = NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&node_00), "node-1-0.gang"))
            .fence_up(part.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert_eq!(e.message(), "node (1,0): no rank of job 999 here (yet)");
        // The same on the stream children keep open (NodeRelay.FenceStream): a user's
        // certificate cannot open it; a node's parts are answered as the call's, one by
        // one, and an error does not end the stream.
        let parts = || tokio_stream::iter(vec![part.clone(), part.clone()]);
        let e = NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&user), "node-1-0.gang"))
            .fence_stream(parts())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let mut answers =
            NodeRelayClient::new(tls::mtls(agent_10, &ca, Some(&node_00), "node-1-0.gang"))
                .fence_stream(parts())
                .await
                .unwrap()
                .into_inner();
        // The channel's timeout covers the stream's opening, not its messages.
        let within = std::time::Duration::from_secs(30);
        for _ in 0..2 {
            let a = tokio::time::timeout(within, answers.message())
                .await
                .expect("node (1,0) answers a fence part within 30 s")
                .unwrap()
                .expect("an answer to each part");
            assert_eq!(a.code, Code::NotFound as i32, "{a:?}");
            assert_eq!(a.message, "node (1,0): no rank of job 999 here (yet)");
            assert!(a.response.is_none());
        }
        let end = tokio::time::timeout(within, answers.message())
            .await
            .expect("node (1,0) ends the stream within 30 s");
        assert!(end.unwrap().is_none());

        // The master's agent port: node (0,0)'s certificate cannot speak for (1,0).
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

/// A node's certificate speaks for the ranks on that node only: it cannot end another
/// node's rank (an exit report) nor write another node's job output, nor output of a job
/// that was never placed. (Found by the hostile-user review: node (1,1)'s certificate
/// marked a job on (0,0) completed; node (0,1)'s replaced a job's output on (1,0).)
#[test]
fn a_node_speaks_only_for_the_ranks_it_holds() {
    let c = cluster_with(2, 2, |_| {});
    let pki = c.pki();
    let ca = pki.ca();
    let agents = c.agents_addr().expect("the agent port");
    let out = prun(
        &c,
        &[
            "-n",
            "1",
            "--detach",
            "--",
            "sh",
            "-c",
            "echo mine; sleep 600",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    let job = wait_state(&c, id, "running", T);
    let sm = &job["submesh"];
    let (x, y) = (
        sm["x"].as_u64().unwrap() as u32,
        sm["y"].as_u64().unwrap() as u32,
    );
    let (ox, oy) = (1 - x, 1 - y);
    wait_for(T, "the job's first output", || {
        (stdout(&gangctl(&c, &["output", &id.to_string()])) == "mine\n").then_some(())
    });
    let other = pki.files(&PeerName::Node { x: ox, y: oy });
    let rt = runtime();
    rt.block_on(async {
        let mut registry =
            AgentRegistryClient::new(tls::mtls(agents, &ca, Some(&other), "master.gang"));
        let e = registry
            .report_exit(RankExit {
                job_id: id,
                rank: 0,
                x: ox,
                y: oy,
                how: Some(gang_proto::v1::rank_exit::How::Code(0)),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_denied(&e, &format!("node ({ox},{oy}) holds no rank 0 of job {id}"));
        let forged = |job_id: u64| gang_proto::v1::OutputBatch {
            job_id,
            chunks: vec![gang_proto::v1::Output {
                rank: 0,
                stream: gang_proto::v1::Stream::Stdout as i32,
                data: b"forged\n".to_vec(),
                offset: Some(0),
            }],
        };
        let e = registry.push_output(forged(id)).await.unwrap_err();
        assert_denied(&e, &format!("node ({ox},{oy}) holds no rank 0 of job {id}"));
        // A job not yet submitted has no rank anywhere.
        let e = registry.push_output(forged(id + 100)).await.unwrap_err();
        assert_denied(
            &e,
            &format!("node ({ox},{oy}) holds no rank 0 of job {}", id + 100),
        );
    });
    // The job runs on, its output its own.
    assert_eq!(job_json(&c, id)["state"], "running");
    assert_eq!(stdout(&gangctl(&c, &["output", &id.to_string()])), "mine\n");
    let out = gangctl(&c, &["cancel", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    c.shutdown().unwrap();
}

fn job_json(c: &LocalCluster, id: u64) -> serde_json::Value {
    gangctl_json(c, &["job", &id.to_string()]).unwrap()
}
