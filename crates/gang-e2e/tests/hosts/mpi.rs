//! MPI programs with their ranks on four hosts (a 2x2 mesh, one node a host), and the
//! agents' PMIx servers seen from the other hosts.
//!
//! The programs are the MPI tests' (`tests/mpi/programs.rs`), built with `mpicc.mpich`
//! and `mpicc.openmpi` into a directory every host sees, and run with nothing set by the
//! job: MPICH (ch4:ucx) finds its peers through the agents' PMI-1 server, Open MPI through
//! their PMIx servers, both fencing through the master; the ranks then talk over TCP
//! between the hosts' addresses (each rank its own node to both libraries, and UCX's
//! shared-memory transports unreachable across the hosts' PID and IPC namespaces).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use gang_local::hosts::EmulatedHosts;

use crate::programs::{Impl, MODES, PROGRAM, check, compile, text};
use crate::{gangctl_json, hosts, hosts_keys, ok, prun, prun_env, shared_dir};

fn run(c: &EmulatedHosts, prog: &Path, mode: &str, env: &[(&str, &str)]) -> (String, String) {
    let prog = prog.display().to_string();
    let out = prun_env(c, &["-n", "2x2", "--", &prog, mode], env);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{prog} {mode} across hosts ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    check(&stdout, 4, mode);
    (stdout, stderr)
}

#[test]
fn mpich_and_open_mpi_programs_span_four_hosts_over_tcp_under_ten_ms_switching() {
    let c = hosts_keys(
        2,
        2,
        4,
        vec![("quantum_ms".into(), toml::Value::Integer(10))],
    );
    let dir = shared_dir("mpi-");
    for imp in [Impl::Mpich, Impl::OpenMpi] {
        let prog = compile(
            imp.mpicc(),
            dir.path(),
            &format!("mpitest-{imp:?}"),
            PROGRAM,
        );
        // Nothing set by the job.
        for mode in MODES {
            let t = Instant::now();
            run(&c, &prog, mode, &[]);
            eprintln!("{imp:?} {mode} on 4 hosts: {:?}", t.elapsed());
        }
        // Which transport: each library's own log.
        let (stdout, stderr) = match imp {
            // UCX's lanes to each peer: `ep_cfg[N]: tag(tcp/eth0 ...)`.
            Impl::Mpich => run(&c, &prog, "ring", &[("UCX_LOG_LEVEL", "info")]),
            Impl::OpenMpi => run(&c, &prog, "ring", &[("OMPI_MCA_btl_base_verbose", "100")]),
        };
        let log = format!("{stdout}\n{stderr}");
        match imp {
            Impl::Mpich => {
                let lanes: Vec<&str> = log.lines().filter(|l| l.contains("ep_cfg[")).collect();
                // Every rank's endpoint to a peer on another host is TCP on eth0; only
                // its endpoint to itself is `self`.
                assert!(
                    lanes.iter().any(|l| l.contains("tag(tcp/eth0")),
                    "no TCP lane: {log}"
                );
                assert!(
                    lanes
                        .iter()
                        .all(|l| l.contains("tcp/eth0") || l.contains("tag(self/")),
                    "a lane that is neither TCP on eth0 nor self: {lanes:#?}"
                );
            }
            Impl::OpenMpi => {
                let connects: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("btl:tcp: connect() to"))
                    .collect();
                assert!(!connects.is_empty(), "no btl/tcp connection: {log}");
                assert!(
                    connects.iter().all(|l| l.contains("to 10.77.0.")),
                    "{connects:#?}"
                );
            }
        }
        // Two jobs in two slices of 10 ms: every ring message and all-to-all block checked.
        std::thread::scope(|s| {
            let a = s.spawn(|| run(&c, &prog, "ring", &[]));
            let b = s.spawn(|| run(&c, &prog, "alltoall", &[]));
            a.join().unwrap();
            b.join().unwrap();
        });
    }
    let stats = gangctl_json(&c, &["stats"]);
    eprintln!("switches reported: {}", stats["switches_reported"]);
    assert!(
        stats["switches_reported"].as_u64().unwrap_or(0) >= 2,
        "{stats}"
    );
    drop(dir);
    c.shutdown().unwrap();
}

/// Host `i`'s listening TCP sockets on `port` (IPv4 and IPv6), as its kernel lists them.
fn listeners(c: &EmulatedHosts, i: usize, port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{}/net/{table}", c.init_pid(i))).unwrap();
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN.
            let Some((addr, p)) = f.get(1).and_then(|a| a.rsplit_once(':')) else {
                continue;
            };
            if f.get(3) == Some(&"0A") && u16::from_str_radix(p, 16) == Ok(port) {
                found.push(format!("{table} {addr}"));
            }
        }
    }
    found
}

/// Connect to `to` from inside host `i`'s network namespace (a thread of this test
/// process, moved there).
fn connect_from(c: &EmulatedHosts, i: usize, to: SocketAddr) -> std::io::Result<TcpStream> {
    let ns = std::fs::File::open(format!("/proc/{}/ns/net", c.init_pid(i))).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns(2) on a descriptor this thread holds open; it changes only the
            // calling thread's network namespace, and the thread ends right after.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
        })
        .join()
        .unwrap()
    })
}

/// The project's note: OpenPMIx's `native` security over TCP believes the uid a client
/// sends, which the agent's gate makes up for by the kernel's record of the connecting
/// socket's owner (`/proc/net/tcp`), on loopback. With ranks really on other hosts: every
/// rank reaches its own agent's server on its own host's loopback (Open MPI's MPI_Init
/// across the hosts goes through four gates, one per host's network namespace), the
/// servers listen on loopback only, and no other host can reach one.
#[test]
fn pmix_servers_listen_on_their_hosts_loopback_and_no_other_host_reaches_them() {
    let c = hosts(2, 2, 4);
    let dir = shared_dir("pmix-");
    let prog = compile(Impl::OpenMpi.mpicc(), dir.path(), "mpitest", PROGRAM);
    run(&c, &prog, "pi", &[]);
    // A job that holds its registration and says where its server is.
    let script = format!(
        "echo \"$PMIX_SERVER_URI41 $(hostname)\" > {d}/uri.$GANG_RANK.tmp && mv {d}/uri.$GANG_RANK.tmp {d}/uri.$GANG_RANK && exec sleep 600",
        d = dir.path().display()
    );
    let out = prun(
        &c,
        &[
            "-n", "2x2", "--mpi", "pmix", "--detach", "--", "sh", "-c", &script,
        ],
    );
    let id = ok(&out, "the holder's job").trim().to_string();
    let uris: Vec<(u16, String)> = (0..4)
        .map(|r| {
            let path = dir.path().join(format!("uri.{r}"));
            let line = gang_e2e::wait_for(Duration::from_secs(60), "the rank's PMIx URI", || {
                std::fs::read_to_string(&path).ok()
            });
            let (uri, host) = line.trim().split_once(' ').unwrap();
            let addr = uri.split_once(";tcp4://").unwrap().1;
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST, "{line}");
            (addr.port(), host.to_string())
        })
        .collect();
    for (r, (port, host)) in uris.iter().enumerate() {
        let i: usize = host.strip_prefix("host-").unwrap().parse().unwrap();
        assert_eq!(c.name(i), host);
        // Its server's port on its host: loopback only.
        let l = listeners(&c, i, *port);
        assert_eq!(
            l,
            [format!(
                "tcp {:08X}",
                u32::from(Ipv4Addr::LOCALHOST).to_be()
            )],
            "rank {r} on {host}: listeners on port {port}"
        );
        // From every other host, and from the host itself, at its cluster address:
        // refused by the kernel, nothing listens there.
        let addr = c.layout().hosts[i].addr;
        for from in 1..=4 {
            match connect_from(&c, from, SocketAddr::from((addr, *port))) {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                other => panic!(
                    "{} reaching {host}'s PMIx port {addr}:{port}: {other:?}",
                    c.name(from)
                ),
            }
        }
        // The port on another host's loopback is that host's own business, not this
        // server: a rank can only ever reach the server of the host it runs on.
    }
    let cancel = std::process::Command::new(gang_e2e::bin_dir().join("gangctl"))
        .args(["cancel", &id])
        .env("GANG_MASTER", c.master_addr())
        .output()
        .unwrap();
    ok(&cancel, "cancel");
    drop(dir);
    c.shutdown().unwrap();
}
