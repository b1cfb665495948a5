//! etcd and standbys against those who would abuse them: a master that will not talk to
//! an etcd anyone may write without a certificate, jobs forged in etcd failed when read
//! back, a standby flooded with connections that still takes over and serves.

use super::*;

/// A master whose etcd speaks TLS and asks for a client certificate: given the CA, its
/// certificate and key (`--etcd-ca`, `--etcd-cert`, `--etcd-key`), it leads, saves and
/// runs jobs as over plain HTTP.
#[test]
fn a_master_on_an_etcd_that_asks_for_tls_and_a_certificate() {
    let etcd = EtcdCluster::start_tls(3).expect("etcd starts");
    let files = etcd.client_tls().expect("TLS files");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("output");
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut opts = options(&[
        "--output-dir",
        &path(&out),
        "--etcd-ca",
        &path(&files.ca),
        "--etcd-cert",
        &path(&files.cert),
        "--etcd-key",
        &path(&files.key),
    ]);
    opts.state = Some(PathBuf::from(etcd.url("gang/tls")));
    let c = LocalCluster::start((2, 2), opts).expect("the master leads over TLS");
    let id = submit(&c, "2x2", &["true"]);
    wait_state(&c, id, "completed", T);
    // Saved in etcd: read back over TLS with the same certificate.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tls = gang_etcd::Tls::read(&files.ca, Some((&files.cert, &files.key))).unwrap();
    let saved = rt.block_on(async {
        let e = gang_etcd::Etcd::connect_tls(&etcd.endpoints(), T, Some(&tls)).unwrap();
        e.get_prefix(b"/gang/tls/jobs/", 100).await.unwrap()
    });
    assert_eq!(saved.len(), 1, "the job's row in etcd");
}

/// Rows others wrote into etcd (a network "trusted" that was not): queued jobs in the name
/// of users they are not, or with groups their user is not in. The next leader reads them
/// back, checks each against the account database, and fails them saying why: none runs.
#[test]
fn jobs_forged_in_etcd_are_refused_when_read_back() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    // First: this etcd asks no certificate, and the master will not run on it unless told
    // the network is the masters' alone.
    let refused = std::process::Command::new(gang_e2e::bin_dir().join("gang-master"))
        .args(["--mesh", "2x2", "--state", &etcd.url("gang/forged")])
        .output()
        .expect("gang-master runs");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("without a client certificate") && said.contains("--etcd-trusted-network"),
        "{said}"
    );
    let mut p = pair(&etcd, "gang/forged");
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let forge = |id: u64, uid: u32, user: &str, groups: &[u32]| {
        let mut row = gang_e2e::failover::saved_job(id, "queued");
        row.record.submesh = None;
        row.record.start_ns = 0;
        row.record.end_ns = 0;
        let spec = std::sync::Arc::make_mut(&mut row.record.spec);
        spec.owner.uid = uid;
        spec.owner.gid = groups[0];
        spec.owner.groups = groups.to_vec();
        spec.owner.user = user.into();
        spec.argv = vec!["sh".into(), "-c".into(), format!("touch {}", ran.display())];
        spec.cwd = "/".into();
        spec.shape = "1x1".into();
        row.record.w = 1;
        row.record.h = 1;
        serde_json::to_vec(&row).unwrap()
    };
    // Ids well past the real ones.
    let forged = [
        (900, forge(900, 0, "nobody", &[0])),
        (901, forge(901, 65534, "nobody", &[65534, 0])),
        (902, forge(902, 4242, "ghost", &[4242])),
    ];
    rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(3)).unwrap();
        for (id, row) in &forged {
            e.put(format!("/gang/forged/jobs/{id:020}").as_bytes(), row)
                .await
                .unwrap();
        }
    });
    // The standby takes over, with what it followed of etcd.
    p.c.stop_master(Signal::SIGKILL).unwrap();
    wait_for(T, "the standby to lead", || {
        p.b_ready.exists().then_some(())
    });
    for (id, why) in [
        (900, "uid 0 is root, not nobody"),
        (901, "nobody is not in group 0"),
        (902, "uid 4242 is no user on this host"),
    ] {
        let j = wait_state(&p.both, id, "failed", T);
        let reason = j["reason"].as_str().unwrap();
        assert!(
            reason.contains("refused when the master read it back") && reason.contains(why),
            "{id}: {reason}"
        );
    }
    // A real job still runs on the new leader; none of the forged ones ran.
    let id = submit(&p.both, "1x1", &["true"]);
    wait_state(&p.both, id, "completed", T);
    assert!(!ran.exists(), "a forged job ran");
}

/// A standby flooded by an ordinary user (nobody) on its socket (0666) and client port,
/// 4,000 connections held and reopened: a client that lists it first moves on to the
/// leader at once; killed, the leader hands over to it, which serves (its connections of
/// standing by dropped, its own admission counting afresh) with its descriptors bounded,
/// and answers root while the flood goes on.
#[test]
fn a_flooded_standby_takes_over_and_serves() {
    use gang_e2e::flood::{Flood, Target as FloodTarget, open_fds};
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let mut p = pair(&etcd, "gang/flood");
    let standby_pid = p.standby.pid().expect("the standby runs");
    let client_port = standby_client_port(&p.b_log);
    // Before the flood: a caller with neither certificate nor socket learns only to move
    // on; one on the socket learns where the leader is.
    let stranger = stranger_asks_standby(&p.c.ca(), client_port);
    assert!(stranger.contains("stands by"), "{stranger}");
    assert!(
        !stranger.contains("pid=") && !stranger.contains("clients="),
        "an unknown caller was told where the leader is: {stranger}"
    );
    let on_socket = gangctl(&Masters(format!("unix:{}", p.b_sock.display())), &["jobs"]);
    let said = String::from_utf8_lossy(&on_socket.stderr);
    assert!(said.contains("clients="), "{said}");
    let floods = [
        Flood::start(
            FloodTarget::Unix(p.b_sock.clone()),
            2000,
            Some((65534, 65534)),
        ),
        Flood::start(FloodTarget::Tcp(client_port), 2000, Some((65534, 65534))),
    ];
    wait_for(T, "the floods to be answered (closed and reopened)", || {
        floods.iter().all(|f| f.reconnects() > 100).then_some(())
    });
    // Standby first in the list: passed over at once.
    let t = Instant::now();
    let out = gangctl(&p.both, &["jobs"]);
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let standby_first = Masters(format!("unix:{},{}", p.b_sock.display(), p.c.master_addr()));
    let t = Instant::now();
    let out = gangctl(&standby_first, &["jobs"]);
    let took_first = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took_first < Duration::from_secs(8), "{took_first:?}");
    let fds_standing_by = open_fds(standby_pid);
    p.c.stop_master(Signal::SIGKILL).unwrap();
    wait_for(T, "the flooded standby to lead", || {
        p.b_ready.exists().then_some(())
    });
    let id = submit(&p.both, "1x1", &["true"]);
    wait_state(&p.both, id, "completed", T);
    let leader_pid = p.standby.pid().expect("the new leader runs");
    assert_eq!(
        leader_pid,
        standby_pid,
        "the standby did not exit: {}",
        read(&p.b_log)
    );
    let fds_leading = open_fds(leader_pid);
    eprintln!(
        "flooded standby: {} and {} held; gangctl with the standby listed second {took:?}, \
         first {took_first:?}; descriptors {fds_standing_by} standing by, {fds_leading} leading",
        floods[0].held(),
        floods[1].held()
    );
    assert!(fds_standing_by < 1500, "{fds_standing_by}");
    assert!(fds_leading < 1500, "{fds_leading}");
}

/// The client port a standby's log says it answers on.
fn standby_client_port(log: &Path) -> std::net::SocketAddr {
    let text = wait_for(T, "the standby's ports in its log", || {
        let t = without_colours(&read(log));
        t.contains("calls are answered with where the leader is")
            .then_some(t)
    });
    let line = text
        .lines()
        .find(|l| l.contains("calls are answered with where the leader is"))
        .unwrap();
    let v = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("clients="))
        .expect("clients= in the log line");
    v.parse().expect("an address")
}

/// A gRPC call to a standby's TLS port with no certificate and no token (curl, trusting
/// the cluster's CA): the grpc-message it is answered with (decoded: gRPC percent-encodes
/// it in the header).
fn stranger_asks_standby(ca: &Path, port: std::net::SocketAddr) -> String {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    // An empty ListJobsRequest in one gRPC frame.
    std::fs::write(&body, [0u8; 5]).unwrap();
    let o = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--http2", "--max-time", "30"])
        .arg("--cacert")
        .arg(ca)
        .args([
            "--resolve",
            &format!("master.gang:{}:127.0.0.1", port.port()),
        ])
        .args(["--dump-header", "-", "--output", "/dev/null", "-X", "POST"])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(format!(
            "https://master.gang:{}/gang.v1.JobService/ListJobs",
            port.port()
        ))
        .output()
        .expect("curl runs (scripts/setup-test-deps.sh installs it)");
    assert!(
        o.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let headers = String::from_utf8_lossy(&o.stdout).to_string();
    let message = headers
        .lines()
        .find_map(|l| l.strip_prefix("grpc-message:"))
        .unwrap_or_else(|| panic!("no grpc-message in {headers}"))
        .trim();
    percent_encoding::percent_decode_str(message)
        .decode_utf8_lossy()
        .into_owned()
}
