//! The node's PMIx listener attacked by another local user (security review, "Hostile
//! users on a shared machine"): `tcp4://127.0.0.1:PORT` is open to every user of the
//! host. Before the gate, one idle connection held the library's progress thread in a
//! blocking read, and a forged handshake (`PMIX_SECURITY_MODE=none`, or `native` with a
//! made-up uid) claiming a registered rank was believed: every PMIx launch on the node
//! then hung. Here the attacker holds such connections while other users' jobs run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::accounts::{Accounts, TestUser, command_as, on_thread_as, output_within};
use crate::programs::{Impl, check, text};

/// A handshake as OpenPMIx 4.2's client sends it (`send_connect_ack`): a 16-byte header
/// whose third word is the body's length (host order), then the security module, the
/// credential, peer type 0 (a rank), its nspace and rank, version, bfrops, buffer type
/// and data store.
fn forged_handshake(psec: &str, cred: &[u8], nspace: &str, rank: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(psec.as_bytes());
    body.push(0);
    body.extend_from_slice(&(cred.len() as u32).to_be_bytes());
    body.extend_from_slice(cred);
    body.push(0);
    body.extend_from_slice(nspace.as_bytes());
    body.push(0);
    body.extend_from_slice(&rank.to_be_bytes());
    body.extend_from_slice(b"4.2.2\0v41\0");
    body.push(2);
    body.extend_from_slice(b"hash\0");
    let mut msg = Vec::new();
    msg.extend_from_slice(&(-1i32).to_ne_bytes());
    msg.extend_from_slice(&u32::MAX.to_ne_bytes());
    msg.extend_from_slice(&(body.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&body);
    msg
}

/// Wait for `path` to hold a line, for at most `limit`.
fn read_when_written(path: &Path, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server ended the connection within `limit` (what it sent before is
/// ignored: an end is what frees a blocked reader).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 256];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

fn prun_as(c: &gang_local::LocalCluster, u: &TestUser, args: &[&str]) -> std::process::Command {
    let mut cmd = command_as(&gang_e2e::bin_dir().join("prun"), u);
    cmd.env("GANG_MASTER", c.master_addr()).args(args);
    cmd
}

#[test]
fn another_users_idle_or_forged_pmix_connections_cost_nobody_else() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (useradd)");
        return;
    }
    // Declared first, dropped last: after the cluster and the ranks running as the users.
    let mut accounts = Accounts::new();
    let attacker = accounts.user("pa", &[]);
    let holder = accounts.user("ph", &[]);
    let plain = accounts.user("pn", &[]);
    let mpi = accounts.user("pm", &[]);
    let shared = tempfile::Builder::new()
        .prefix("gang-pmix-gate-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = shared.path().join("mpitest");
    std::fs::copy(crate::programs::program(Impl::OpenMpi), &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Where the holder's rank writes what it was given (the attacker learns the port as
    // any user can, from the listening sockets; the test takes the short way).
    let out_dir = shared.path().join("holder");
    std::fs::create_dir(&out_dir).unwrap();
    std::os::unix::fs::chown(&out_dir, Some(holder.uid), Some(holder.gid)).unwrap();
    // Slices: the jobs below share the holder's node with it rather than queue behind it.
    let mut opts = gang_e2e::options(&["--mpl", "3"]);
    opts.socket = Some(shared.path().join("master.sock"));
    let c = gang_local::LocalCluster::start((2, 1), opts).expect("cluster");

    // A registered rank that never connects: the holder's, under --mpi pmix.
    let uri_file = out_dir.join("uri");
    let script = format!(
        "echo \"$PMIX_SERVER_URI41 $PMIX_NAMESPACE $GANG_NODE\" > {d}/tmp && mv {d}/tmp {d}/uri && exec sleep 300",
        d = out_dir.display()
    );
    let mut holding: Child = prun_as(
        &c,
        &holder,
        &["-n", "1x1", "--mpi", "pmix", "--", "sh", "-c", &script],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let line = read_when_written(&uri_file, Duration::from_secs(60));
    let mut words = line.split_whitespace();
    let (uri, nspace, node) = (
        words.next().unwrap().to_string(),
        words.next().unwrap().to_string(),
        words.next().unwrap().to_string(),
    );
    let addr = uri
        .split_once(";tcp4://")
        .expect("a tcp4 URI")
        .1
        .to_string();
    eprintln!("attacking {addr} of node {node}, claiming rank 0 of {nspace}");

    // The attack, as a user with no job here: an idle connection, a handshake with no
    // security claiming the holder's rank, and one with the holder's uid made up.
    let native_cred: Vec<u8> = [holder.uid.to_ne_bytes(), holder.gid.to_ne_bytes()].concat();
    let attacks = [
        None,
        Some(forged_handshake("none", &[], &nspace, 0)),
        Some(forged_handshake("native", &native_cred, &nspace, 0)),
    ];
    let started = Instant::now();
    let mut held: Vec<TcpStream> = on_thread_as(&attacker, move || {
        let mut held = Vec::new();
        for hello in attacks {
            let mut s = TcpStream::connect(&addr)?;
            if let Some(hello) = hello {
                s.write_all(&hello)?;
            }
            held.push(s);
        }
        Ok(held)
    })
    .expect("the attacker connects");
    // The holder, who has a rank here, cannot stall the library either: an idle
    // connection, and its own rank claimed with no security.
    let (addr, own) = (
        uri.split_once(";tcp4://").unwrap().1.to_string(),
        forged_handshake("none", &[], &nspace, 0),
    );
    held.extend(
        on_thread_as(&holder, move || {
            let idle = TcpStream::connect(&addr)?;
            let mut forged = TcpStream::connect(&addr)?;
            forged.write_all(&own)?;
            Ok([idle, forged])
        })
        .expect("the holder connects"),
    );
    // MUNGE, which munged here vouches for (the setup script starts it): a real credential
    // of the holder's, sent by the holder for its own rank (only `native` is offered, and
    // accepted), and the same credential replayed by the attacker.
    let munged = command_as(Path::new("/usr/bin/munge"), &holder)
        .args(["-n"])
        .output()
        .expect("munge runs (sh scripts/setup-test-deps.sh installs it)");
    assert!(
        munged.status.success(),
        "munged does not answer (sh scripts/setup-test-deps.sh starts it): {}",
        String::from_utf8_lossy(&munged.stderr)
    );
    let mut cred = munged.stdout;
    cred.push(0);
    let addr = uri.split_once(";tcp4://").unwrap().1.to_string();
    for (who, hello) in [
        (&holder, forged_handshake("munge", &cred, &nspace, 0)),
        (&attacker, forged_handshake("munge", &cred, &nspace, 0)),
    ] {
        let addr = addr.clone();
        held.push(
            on_thread_as(who, move || {
                let mut s = TcpStream::connect(&addr)?;
                s.write_all(&hello)?;
                Ok(s)
            })
            .expect("a MUNGE handshake is sent"),
        );
    }

    // Another user's job with no MPI, on both nodes: it runs, and no node is lost.
    let out = output_within(
        &mut prun_as(
            &c,
            &plain,
            &["-n", "2x1", "--mpi", "none", "--", "echo", "plain ok"],
        ),
        gang_e2e::PRUN_DEADLINE,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("plain ok").count(), 2, "{stdout}");
    assert!(!stderr.contains("lost"), "{stderr}");

    // A third user's Open MPI job on both nodes, the attacked one included, finds its
    // peers through PMIx.
    let out = output_within(
        &mut prun_as(
            &c,
            &mpi,
            &[
                "-n",
                "2x1",
                "--mpi",
                "pmix",
                "--",
                prog.to_str().unwrap(),
                "ring",
            ],
        ),
        gang_e2e::PRUN_DEADLINE,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    check(&stdout, 2, "ring");
    eprintln!("both jobs ran under attack in {:?}", started.elapsed());

    // The attacker's connections were ended without the library seeing them.
    for (i, s) in held.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(30)),
            "attack {i}'s connection is still open"
        );
    }
    let (x, y) = node.split_once(',').unwrap();
    let log = std::fs::read_to_string(c.agent_log(x.parse().unwrap(), y.parse().unwrap())).unwrap();
    let refused = format!("uid {}, who has no rank registered here", attacker.uid);
    assert!(
        log.matches(&refused).count() >= 4,
        "the gate's refusals are not in the agent's log"
    );
    let munge = format!(
        "uid {} asked for security module \"munge\"; only \"native\" is accepted",
        holder.uid
    );
    assert!(
        log.contains(&munge),
        "no refusal of the holder's MUNGE handshake"
    );

    let _ = holding.kill();
    let _ = holding.wait();
    c.shutdown().unwrap();
}
