//! Masters that keep their state in a real 3-member etcd cluster (Debian's etcd-server, on
//! loopback): one leads, another stands by (it refuses every call, naming the leader),
//! agents and clients know both. Killing the leader hands over to the standby with every acknowledged job and
//! the running ones undisturbed; a leader paused past its lease cannot write once another
//! leads, and steps down.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gang_e2e::etcd_cluster::{EtcdCluster, free_port};
use gang_e2e::*;
use gang_local::LocalCluster;
use gang_local::unit::Unit;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

mod hostile;

const T: Duration = Duration::from_secs(30);
/// A lease's expiry in an etcd that may change leader under load, renewing every lease.
const LEASE_CHURN: Duration = Duration::from_secs(120);
/// The test's etcd asks no client certificate: the masters are told the network is theirs.
const TRUSTED: &str = "--etcd-trusted-network";

/// Both masters, as clients are told of them.
struct Masters(String);

impl Master for Masters {
    fn master(&self) -> String {
        self.0.clone()
    }
}

/// A cluster whose master leads, and a standby on the same etcd prefix.
struct Pair {
    c: LocalCluster,
    standby: Unit,
    b_ready: PathBuf,
    b_log: PathBuf,
    b_sock: PathBuf,
    both: Masters,
    _dir: tempfile::TempDir,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.standby.kill();
    }
}

fn pair(etcd: &EtcdCluster, prefix: &str) -> Pair {
    pair_with_lease(etcd, prefix, "1")
}

fn pair_with_lease(etcd: &EtcdCluster, prefix: &str, lease_s: &str) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("output");
    let b_listen = free_port();
    let b_agents = free_port();
    let mut opts = options(&[
        "--etcd-lease-s",
        lease_s,
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    opts.state = Some(PathBuf::from(etcd.url(prefix)));
    opts.master_args.push(TRUSTED.into());
    opts.standby_agent_ports = vec![b_agents];
    let c = LocalCluster::start((2, 2), opts).expect("the first master leads");
    let b_sock = dir.path().join("b.sock");
    let b_ready = dir.path().join("b.ready");
    let b_log = dir.path().join("b.log");
    let standby = c
        .standby_master(b_listen, b_agents, &b_sock, &b_ready, &b_log)
        .unwrap();
    wait_showing(&b_log, "the second master to stand by, answering", || {
        read(&b_log)
            .contains("standing by: calls are answered")
            .then_some(())
    });
    assert!(!b_ready.exists(), "a standby must not serve");
    let both = Masters(format!("{},unix:{}", c.master_addr(), b_sock.display()));
    // It answers, but only to say where the leader is.
    wait_for(T, "the standby to answer", || b_sock.exists().then_some(()));
    Pair {
        c,
        standby,
        b_ready,
        b_log,
        b_sock,
        both,
        _dir: dir,
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// [`wait_for`] for [`T`], showing the end of `log` (a master's) if it times out.
fn wait_showing<R>(log: &Path, what: &str, f: impl FnMut() -> Option<R>) -> R {
    wait_showing_within(T, log, what, f)
}

fn wait_showing_within<R>(
    within: Duration,
    log: &Path,
    what: &str,
    f: impl FnMut() -> Option<R>,
) -> R {
    let waited =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_for(within, what, f)));
    waited.unwrap_or_else(|e| {
        let text = read(log);
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        eprintln!("{}, its last lines:", log.display());
        for l in tail.iter().rev() {
            eprintln!("  {l}");
        }
        std::panic::resume_unwind(e)
    })
}

fn state_of(m: &impl Master, id: u64) -> String {
    gangctl_json(m, &["job", &id.to_string()]).unwrap()["state"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn killing_the_leader_hands_over_to_the_standby_with_every_job() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let mut p = pair(&etcd, "gang/kill");
    let dir = tempfile::tempdir().unwrap();
    // Asked alone, the standby refuses, naming the leader; listed first, it is skipped.
    let alone = gangctl(&Masters(format!("unix:{}", p.b_sock.display())), &["jobs"]);
    let said = String::from_utf8_lossy(&alone.stderr).into_owned();
    assert!(!alone.status.success());
    assert!(
        said.contains("stands by") && said.contains("the leader is clients="),
        "{said}"
    );
    let standby_first = Masters(format!("unix:{},{}", p.b_sock.display(), p.c.master_addr()));
    let first = submit(&standby_first, "1x1", &["true"]);
    wait_state(&standby_first, first, "completed", T);
    // A job that runs through the failover, and jobs that completed before it.
    let running = submit(&p.both, "1x1", &["sh", "-c", &busy_script(dir.path())]);
    let pids = rank_pids(dir.path(), 1, T);
    let done: Vec<u64> = (0..10).map(|_| submit(&p.both, "1x1", &["true"])).collect();
    for &id in &done {
        wait_state(&p.both, id, "completed", T);
    }

    // A prun attached to a job that writes through the failover.
    let attached = std::process::Command::new(bin_dir().join("prun"))
        .env("GANG_MASTER", &p.both.0)
        .args(["-n", "1x1", "--", "sh", "-c"])
        .arg("i=0; while [ $i -lt 40 ]; do echo line $i; i=$((i+1)); sleep 0.1; done")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Four clients submit throughout; the leader is killed once some were acknowledged.
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (m, acked) = (Masters(p.both.0.clone()), acked.clone());
            std::thread::spawn(move || {
                (0..40)
                    .map(|_| {
                        // Held: a job whose launch is in flight when the leader dies is
                        // lost with its rank (the adoption rule after any master restart);
                        // what is measured here is acknowledgement.
                        let out =
                            prun(&m, &["-n", "1x1", "--detach", "--hold", "--", "true"], None);
                        assert!(
                            out.status.success(),
                            "{}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                        acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        id
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    wait_for(T, "submissions to be acknowledged", || {
        (acked.load(std::sync::atomic::Ordering::Relaxed) >= 20).then_some(())
    });
    let killed = Instant::now();
    p.c.stop_master(Signal::SIGKILL).unwrap();
    wait_for(T, "the standby to lead and serve", || {
        p.b_ready.exists().then_some(())
    });
    let failover = killed.elapsed();
    let mut through: Vec<u64> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    through.sort_unstable();
    let n = through.len();
    through.dedup();
    assert_eq!(
        (n, through.len()),
        (160, 160),
        "every submission acknowledged once"
    );
    // The attached prun reattached to the new leader and got every line, once.
    let (out, killed) = output_within(attached, PRUN_DEADLINE);
    assert!(
        !killed,
        "the attached prun did not end within {PRUN_DEADLINE:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = (0..40).map(|i| format!("line {i}")).collect();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        lines,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("failover (kill -9 to the standby serving): {failover:?}");
    // Elected, it started from the copy it kept while standing by: it read nothing then.
    let log = read(&p.b_log);
    assert!(
        log.contains("elected leader") && log.contains("state taken from the warm copy"),
        "{log}"
    );

    // Every acknowledged job is there, once; the running one runs on, undisturbed.
    for &id in &done {
        assert_eq!(state_of(&p.both, id), "completed");
    }
    // ...and nothing else: no acknowledged job lost, none doubled by a retry.
    let all = gangctl_json(&p.both, &["jobs", "--all"]).unwrap();
    assert_eq!(
        all.as_array().unwrap().len(),
        done.len() + 3 + through.len(),
        "{all}"
    );
    for j in all.as_array().unwrap() {
        let id = j["id"].as_u64().unwrap();
        if through.binary_search(&id).is_ok() {
            assert_eq!(j["state"], "queued", "{j}");
            assert!(j["held_by"].is_string(), "{j}");
        }
    }
    // Released, they run on the new leader.
    let out = gangctl(
        &p.both,
        &["release", &format!("{}-{}", through[0], through[n - 1])],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for &id in &through {
        wait_state(&p.both, id, "completed", T);
    }
    wait_for(T, "the agents to re-register with the new leader", || {
        let n = gangctl_json(&p.both, &["nodes"]).unwrap();
        n["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["state"] == "up")
            .then_some(())
    });
    assert_eq!(state_of(&p.both, running), "running");
    assert!(
        proc_stat(pids[0]).is_some(),
        "the running job's rank was lost"
    );
    // The new leader takes work: a job submitted now runs and completes.
    let after = submit(&p.both, "1x1", &["true"]);
    wait_state(&p.both, after, "completed", T);
    assert!(after > *done.last().unwrap());
    let out = gangctl(&p.both, &["cancel", &running.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_leader_paused_past_its_lease_cannot_write_and_steps_down() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let mut p = pair(&etcd, "gang/pause");
    let first = submit(&p.both, "1x1", &["true"]);
    wait_state(&p.both, first, "completed", T);
    let a = Pid::from_raw(p.c.master_pid().expect("the leader runs") as i32);
    kill(a, Signal::SIGSTOP).unwrap();
    wait_for(T, "the standby to lead", || {
        p.b_ready.exists().then_some(())
    });
    // The new leader's job; then the old one wakes up, believing it leads. (A client that
    // tries the paused master first waits for it until its --timeout: its socket still
    // accepts. This one asks the new leader alone.)
    let b = Masters(p.both.0.split(',').nth(1).unwrap().to_string());
    let second = submit(&b, "1x1", &["true"]);
    wait_state(&b, second, "completed", T);
    kill(a, Signal::SIGCONT).unwrap();
    let status = wait_for(T, "the old leader to step down", || {
        p.c.master_exit_status()
    });
    assert!(!status.success(), "{status:?}");
    let log = read(&p.c.master_log());
    assert!(log.contains("stepping down"), "{log}");
    // The store is the new leader's: the leader key names it, and its view is all there is.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (leader, jobs) = rt.block_on(async {
        let store = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(3)).unwrap();
        let l = store.get(b"/gang/pause/leader").await.unwrap().unwrap();
        let j = store.get_prefix(b"/gang/pause/jobs/", 100).await.unwrap();
        (String::from_utf8(l.value).unwrap(), j.len())
    });
    assert!(
        leader.contains(&format!(
            "pid={}",
            p.standby.pid().expect("the new leader runs")
        )),
        "{leader}"
    );
    assert_eq!(jobs, 2);
    assert_eq!(state_of(&p.both, second), "completed");
}

/// One etcd member down: nothing noticed. Two: no quorum; changes are refused saying so,
/// reads answer, the leader stays (its lease cannot end without a quorum: it only stops
/// acting until etcd renews it). Members back: it acts again. Then no member answering at
/// all (as if its host were cut off): past its lease it gives leadership up.
#[test]
fn etcd_members_lost_and_back() {
    let mut etcd = EtcdCluster::start(3).expect("etcd starts");
    let mut p = pair_with_lease(&etcd, "gang/members", "2");
    etcd.kill(0);
    for _ in 0..3 {
        let id = submit(&p.both, "1x1", &["true"]);
        wait_state(&p.both, id, "completed", T);
    }
    etcd.kill(1);
    let out = prun(
        &p.both,
        &["-n", "1x1", "--detach", "--timeout", "20s", "--", "true"],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "a change without quorum was accepted"
    );
    assert!(err.contains("quorum"), "{err}");
    let listed = gangctl_json(&p.both, &["jobs", "--all"]).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    // Past several leases without quorum, the same master still leads (nobody could take
    // over, and its lease cannot expire meanwhile).
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        p.c.master_exit_status().is_none(),
        "{}",
        read(&p.c.master_log())
    );
    assert!(
        read(&p.c.master_log()).contains("changes are refused until it is renewed"),
        "the leader stopped acting: {}",
        read(&p.c.master_log())
    );
    etcd.restart(0).unwrap();
    etcd.restart(1).unwrap();
    etcd.wait_healthy(T).unwrap();
    // Its lease renewed (it never ended: without quorum nobody could end it), it acts again.
    wait_for(T, "the leader to act again", || {
        read(&p.c.master_log())
            .contains("renewed again: this master leads and acts again")
            .then_some(())
    });
    let id = submit(&p.both, "1x1", &["true"]);
    wait_state(&p.both, id, "completed", T);
    assert!(
        !p.b_ready.exists(),
        "the standby took over: {}",
        read(&p.b_log)
    );

    // No member answers: within the lease, it stops leading.
    let cut = Instant::now();
    for i in 0..3 {
        etcd.pause(i, true);
    }
    let status = wait_for(T, "the leader to step down", || p.c.master_exit_status());
    let took = cut.elapsed();
    for i in 0..3 {
        etcd.pause(i, false);
    }
    eprintln!("cut off from etcd: stepped down after {took:?}");
    assert!(!status.success());
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(read(&p.c.master_log()).contains("cut off from etcd"));
}

/// When `needle` was first logged in `log` (the timestamp that opens its line, RFC 3339 in
/// UTC with microseconds: such stamps compare as strings).
fn logged_at(log: &Path, needle: &str) -> Option<String> {
    let text = read(log);
    let line = text.lines().find(|l| l.contains(needle))?;
    without_colours(line)
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// The leading master's host cut off from etcd (its one link down; it lives in a network
/// namespace of its own): it stops serving within its lease, before another master takes
/// over, and nothing it was asked after the cut lands.
#[test]
fn a_leader_cut_off_from_etcd_stops_within_its_lease() {
    let net = gang_e2e::netns::NetHost::new().expect("a network namespace (tests run as root)");
    let etcd = EtcdCluster::start_also_on(3, Some(net.here)).expect("etcd starts");
    let dir = tempfile::tempdir().unwrap();
    let (c_listen, c_agents) = (free_port(), free_port());
    let mut opts = options(&["--etcd-lease-s", "2"]);
    opts.state = Some(PathBuf::from(etcd.url("gang/cut")));
    opts.master_args.push(TRUSTED.into());
    opts.standby_agent_ports = vec![c_agents];
    let mut cluster = LocalCluster::start((2, 2), opts).expect("the first master leads");
    let first = submit(&cluster, "1x1", &["true"]);
    wait_state(&cluster, first, "completed", T);

    // The master across the link stands by, and leads once the first is gone.
    let [x_sock, x_ready, x_log] = ["x.sock", "x.ready", "x.log"].map(|f| dir.path().join(f));
    let mut cmd = cluster
        .standby_command(
            free_port(),
            free_port(),
            &x_sock,
            &x_ready,
            &x_log,
            Some(&etcd.url_on(net.here, "gang/cut")),
        )
        .unwrap();
    net.run_inside(&mut cmd).unwrap();
    let mut x = KillOnDrop(cmd.spawn().unwrap());
    wait_for(T, "the master across the link to stand by", || {
        read(&x_log).contains("standing by").then_some(())
    });
    cluster.stop_master(Signal::SIGKILL).unwrap();
    wait_showing(&x_log, "the master across the link to lead", || {
        x_ready.exists().then_some(())
    });
    let xm = Masters(format!("unix:{}", x_sock.display()));
    let held = prun(
        &xm,
        &["-n", "1x1", "--detach", "--hold", "--", "true"],
        None,
    );
    assert!(
        held.status.success(),
        "{}",
        String::from_utf8_lossy(&held.stderr)
    );

    // Another master stands by on this side.
    let [c_sock, c_ready, c_log] = ["c.sock", "c.ready", "c.log"].map(|f| dir.path().join(f));
    let _c = cluster
        .standby_master(c_listen, c_agents, &c_sock, &c_ready, &c_log)
        .unwrap();
    wait_for(T, "the third master to stand by", || {
        read(&c_log).contains("standing by").then_some(())
    });

    let cut = Instant::now();
    net.set_link(false).unwrap();
    // Asked after the cut, the master across the link must not carry it out.
    let held_id = String::from_utf8_lossy(&held.stdout).trim().to_string();
    let late = {
        let (xm, id) = (Masters(xm.0.clone()), held_id.clone());
        std::thread::spawn(move || gangctl(&xm, &["cancel", &id]))
    };
    let status = wait_for(T, "the master across the link to stop", || {
        x.0.try_wait().unwrap()
    });
    let took = cut.elapsed();
    eprintln!("cut off from etcd: stopped serving after {took:?}");
    assert!(!status.success());
    let late = late.join().unwrap();
    assert!(
        !late.status.success(),
        "a cancel was acknowledged while cut off: {}",
        String::from_utf8_lossy(&late.stdout)
    );
    // Each etcd leader election renews every lease (etcd-io/etcd#9395): 30 s ran out once.
    wait_showing_within(LEASE_CHURN, &c_log, "the third master to lead", || {
        c_ready.exists().then_some(())
    });
    // It stopped acting when its lease could no longer be confirmed, before etcd could let
    // another master lead; it exits once it learns it cannot reach etcd past the lease.
    let stopped =
        logged_at(&x_log, "changes are refused until it is renewed").expect("the stop is logged");
    let elected = logged_at(&c_log, "elected leader").expect("the election is logged");
    assert!(
        stopped < elected,
        "the cut-off master stopped at {stopped}, after another was elected at {elected}"
    );
    assert!(
        read(&x_log).contains("cut off from etcd"),
        "{}",
        read(&x_log)
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    // The store holds what was acknowledged, and only that.
    let cm = Masters(format!("unix:{}", c_sock.display()));
    let all = gangctl_json(&cm, &["jobs", "--all"]).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    assert_eq!(state_of(&cm, held_id.parse().unwrap()), "queued");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An agent that asks a standby first is refused with where the leader is, and registers
/// with the leader (had it stayed with the standby, it would never register).
#[test]
fn an_agent_sent_to_a_standby_goes_on_to_the_leader() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("output");
    let (b_listen, b_agents) = (free_port(), free_port());
    let mut opts = options(&["--etcd-lease-s", "2", "--output-dir", out.to_str().unwrap()]);
    opts.state = Some(PathBuf::from(etcd.url("gang/agents")));
    opts.master_args.push(TRUSTED.into());
    opts.standby_agent_ports = vec![b_agents];
    opts.standbys_first = true;
    let mut c = LocalCluster::start((2, 2), opts).expect("the first master leads");
    let [b_sock, b_ready, b_log] = ["b.sock", "b.ready", "b.log"].map(|f| dir.path().join(f));
    let _b = c
        .standby_master(b_listen, b_agents, &b_sock, &b_ready, &b_log)
        .unwrap();
    wait_for(T, "the standby to answer", || {
        read(&b_log)
            .contains("calls are answered with where the leader is")
            .then_some(())
    });
    let registered = |c: &LocalCluster| {
        read(&c.agent_log(1, 1))
            .matches("registered with the master")
            .count()
    };
    let before = registered(&c);
    c.stop_agent(1, 1, Signal::SIGKILL).unwrap();
    c.start_agent(1, 1).unwrap();
    wait_for(T, "the restarted agent to register with the leader", || {
        (registered(&c) > before).then_some(())
    });
    assert!(!b_ready.exists(), "{}", read(&b_log));
    // A job on every node runs: the leader has all four.
    let id = submit(&c, "2x2", &["true"]);
    wait_state(&c, id, "completed", T);
}

/// The figure, at full size: 5 kills of the leader, each while 4 clients submit
/// 1,000 jobs (held, with client tokens, retried on whichever master answers); a job runs
/// throughout. Every acknowledged job is in the next leader's list, once; nothing else is.
#[test]
fn five_kills_under_four_thousand_submissions_each_lose_nothing() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("output");
    let mut opts = options(&["--etcd-lease-s", "1", "--output-dir", out.to_str().unwrap()]);
    opts.state = Some(PathBuf::from(etcd.url("gang/kills")));
    opts.master_args.push(TRUSTED.into());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let o = gang_e2e::failover::kills_under_submissions(&rt, opts, 5, 1000);
    eprintln!("{}", o.json());
    assert_eq!(o.acknowledged, 20_000, "{o:?}");
    assert_eq!((o.lost, o.doubled), (0, 0), "{o:?}");
    assert!(
        o.running_undisturbed,
        "the running job was disturbed: {o:?}"
    );
}
