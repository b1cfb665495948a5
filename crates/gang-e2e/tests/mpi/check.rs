//! `prun --mpi-check` (issue #11): the agents preload the PMPI checking library
//! (`crates/gang-mpi-check`) into every rank, which writes blocked receives and message
//! counts into the rank's state page as the messaging library does, so the master's own
//! deadlock check flags an unmodified MPI program that deadlocks, and never one that is
//! only slow. MPICH programs (`mpicc.mpich`), and an Open MPI one under `--mpi pmix` and
//! under the default, auto (the library's Open MPI build, chosen by the program).

use std::process::Output;
use std::time::Duration;

use gang_e2e::{cluster, gangctl, gangctl_json, http_get, prun, wait_for, wait_state};

use crate::programs::{Impl, MODES, build, check, text};

/// Every rank receives from its right neighbour before sending to it: the classic
/// deadlock, on tag 2; with argv[1] = "wait", in MPI_Waitall over two nonblocking
/// receives from it, one of which its neighbour's message (tag 1) matches and the other
/// never.
const DEADLOCK: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank, size, x = 0, y = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello rank %d of %d\n", rank, size);
    fflush(stdout);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    if (argc > 1 && !strcmp(argv[1], "wait")) {
        int z = 0;
        MPI_Request r[2];
        MPI_Irecv(&y, 1, MPI_INT, right, 1, MPI_COMM_WORLD, &r[0]);
        MPI_Irecv(&z, 1, MPI_INT, right, 2, MPI_COMM_WORLD, &r[1]);
        MPI_Send(&x, 1, MPI_INT, left, 1, MPI_COMM_WORLD);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    } else {
        MPI_Recv(&x, 1, MPI_INT, right, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Send(&x, 1, MPI_INT, right, 2, MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
"#;

/// Rank 0 computes (sleeps) for argv[1] seconds while rank 1 waits in a receive from it
/// and the others in a barrier: every rank but one blocked, for many checks; then all
/// complete.
const SLOW_PEER: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, x = 42;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        sleep(atoi(argv[1]));
        MPI_Send(&x, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(&x, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("done rank %d got %d\n", rank, x);
    MPI_Finalize();
    return 0;
}
"#;

fn deadlock() -> String {
    build(Impl::Mpich, "deadlock", DEADLOCK)
        .display()
        .to_string()
}

fn detach(c: &gang_local::LocalCluster, args: &[&str]) -> u64 {
    let out = prun(c, &[&["--detach"], args].concat(), None);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "prun --detach {args:?}: {stderr}");
    stdout
        .trim()
        .parse()
        .expect("prun --detach prints the job id")
}

fn deadlocked(c: &gang_local::LocalCluster, id: u64) -> Option<serde_json::Value> {
    let j = gangctl_json(c, &["job", &id.to_string()]).ok()?;
    j.get("deadlock").is_some().then_some(j)
}

#[test]
fn an_mpi_deadlock_is_flagged_under_mpi_check_and_killed_on_request() {
    let c = cluster(2, 2, &[]);
    let prog = deadlock();
    let out: Output = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi-check",
            "--on-deadlock",
            "kill",
            "--",
            &prog,
        ],
        None,
    );
    let (stdout, err) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{err}");
    assert!(err.contains("DEADLOCKED"), "{err}");
    for r in 0..4 {
        assert!(
            stdout.contains(&format!("hello rank {r} of 4\n")),
            "rank {r} never started as one of 4:\n{stdout}"
        );
        let right = (r + 1) % 4;
        assert!(
            err.contains(&format!("rank {r} on node"))
                && err.contains(&format!("waits for rank {right}, tag 2")),
            "rank {r}'s wait: {err}"
        );
    }
    let job = gangctl_json(&c, &["job", "1"]).unwrap();
    assert_eq!(job["state"], "failed", "{job}");
    assert!(
        job["reason"]
            .as_str()
            .unwrap()
            .starts_with("deadlocked: all 4 ranks"),
        "{job}"
    );
    let d = &job["deadlock"];
    let last_blocked = d["waits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["since_ns"].as_i64().unwrap())
        .max()
        .unwrap();
    let took_ms = (d["detected_ns"].as_i64().unwrap() - last_blocked) / 1_000_000;
    eprintln!("MPI deadlock flagged {took_ms} ms after the last rank blocked");
    assert!(took_ms < 2_000, "flagged after {took_ms} ms");

    // Report: flagged and shown, left running until cancelled.
    let id = detach(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi-check",
            "--on-deadlock",
            "report",
            "--",
            &prog,
        ],
    );
    let job = wait_for(Duration::from_secs(20), "the deadlock flagged", || {
        deadlocked(&c, id)
    });
    assert_eq!(job["state"], "running", "{job}");
    let shown =
        String::from_utf8_lossy(&gangctl(&c, &["job", &id.to_string()]).stdout).into_owned();
    assert!(shown.contains("running, DEADLOCKED"), "{shown}");
    let metrics = http_get(c.metrics_addr(), "/metrics");
    assert!(
        metrics.contains("gang_jobs_deadlocked_total 2"),
        "{metrics}"
    );
    assert!(gangctl(&c, &["cancel", &id.to_string()]).status.success());
    wait_state(&c, id, "cancelled", Duration::from_secs(20));
    c.shutdown().unwrap();
}

/// The same deadlock built with Open MPI, run under the agents' PMIx server, chosen
/// (`--mpi pmix`) or not (auto): the agent preloads the library's Open MPI build, and the
/// master flags it the same way.
#[test]
fn an_open_mpi_deadlock_is_flagged_under_mpi_check_with_pmix_and_with_auto() {
    let c = cluster(2, 2, &[]);
    let prog = build(Impl::OpenMpi, "deadlock", DEADLOCK);
    let prog = prog.to_str().unwrap();
    for mpi in [&["--mpi", "pmix"][..], &[]] {
        let args = [
            &["-n", "2x2"][..],
            mpi,
            &["--mpi-check", "--on-deadlock", "kill", "--", prog],
        ]
        .concat();
        let out = prun(&c, &args, None);
        let (stdout, err) = text(&out);
        assert!(!out.status.success(), "{mpi:?}: {stdout}\n{err}");
        assert!(err.contains("DEADLOCKED"), "{mpi:?}: {stdout}\n{err}");
        for r in 0..4 {
            assert!(
                stdout.contains(&format!("hello rank {r} of 4\n")),
                "{mpi:?}: rank {r} never started as one of 4 (PMIx):\n{stdout}\n{err}"
            );
            let right = (r + 1) % 4;
            assert!(
                err.contains(&format!("waits for rank {right}, tag 2")),
                "{mpi:?}: rank {r}'s wait: {err}"
            );
        }
    }
    c.shutdown().unwrap();
}

/// Ranks killed while connected to their node's PMIx server, then a new job on the same
/// nodes, five times over. OpenPMIx 4.2 forgets to stop reading a client it is told to
/// deregister before it has seen it leave, and the next client given the same descriptor
/// was never read: its `PMIx_Init` waited for the job's data until the fence timed out,
/// or `MPI_Init` failed with "PML add procs failed" (one CI run in ten; one job in two
/// right after a killed one on a busy host). The agent now deregisters a rank only once
/// the library has closed its connection.
#[test]
fn after_open_mpi_jobs_killed_mid_run_the_next_job_on_the_nodes_starts() {
    // Two slices: the next job is placed while the killed one's ranks are still ending,
    // as on a busy cluster (with one, it waits for their exits to be reported).
    let c = cluster(2, 2, &["--mpl", "2"]);
    let dead = build(Impl::OpenMpi, "deadlock", DEADLOCK);
    let dead = dead.to_str().unwrap();
    let prog = crate::programs::program(Impl::OpenMpi);
    let prog = prog.to_str().unwrap();
    for round in 0..5 {
        let out = prun(
            &c,
            &[
                "-n",
                "2x2",
                "--mpi",
                "pmix",
                "--mpi-check",
                "--on-deadlock",
                "kill",
                "--",
                dead,
            ],
            None,
        );
        let (stdout, err) = text(&out);
        assert!(
            err.contains("DEADLOCKED"),
            "round {round}: the deadlocked job was not killed as one:\n{stdout}\n{err}"
        );
        let out = prun(&c, &["-n", "2x2", "--mpi-check", "--", prog, "ring"], None);
        let (stdout, err) = text(&out);
        assert!(
            out.status.success(),
            "round {round}: the job after a killed one failed ({:?}):\n{stdout}\n{err}",
            out.status
        );
        check(&stdout, 4, "ring");
    }
    c.shutdown().unwrap();
}

#[test]
fn a_deadlock_in_a_waitall_on_nonblocking_receives_is_flagged_too() {
    let c = cluster(2, 2, &[]);
    let prog = deadlock();
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi-check",
            "--on-deadlock",
            "kill",
            "--",
            &prog,
            "wait",
        ],
        None,
    );
    let (stdout, err) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{err}");
    assert!(err.contains("DEADLOCKED"), "{err}");
    for r in 0..4 {
        let right = (r + 1) % 4;
        assert!(
            err.contains(&format!("waits for rank {right}, tag 2")),
            "rank {r}'s wait: {err}"
        );
    }
    c.shutdown().unwrap();
}

#[test]
fn without_mpi_check_the_same_deadlock_is_not_seen() {
    let c = cluster(2, 2, &[]);
    let prog = deadlock();
    // Side by side on the mesh: the unchecked copy starts first, so once the checked one
    // is flagged the unchecked one has been through at least as many checks.
    let unchecked = detach(&c, &["-n", "2x1", "--on-deadlock", "kill", "--", &prog]);
    wait_state(&c, unchecked, "running", Duration::from_secs(20));
    let checked = detach(
        &c,
        &[
            "-n",
            "2x1",
            "--mpi-check",
            "--on-deadlock",
            "report",
            "--",
            &prog,
        ],
    );
    wait_for(Duration::from_secs(20), "the checked copy flagged", || {
        deadlocked(&c, checked)
    });
    let job = gangctl_json(&c, &["job", &unchecked.to_string()]).unwrap();
    assert_eq!(job["state"], "running", "{job}");
    assert!(job.get("deadlock").is_none(), "{job}");
    for id in [unchecked, checked] {
        assert!(gangctl(&c, &["cancel", &id.to_string()]).status.success());
        wait_state(&c, id, "cancelled", Duration::from_secs(20));
    }
    c.shutdown().unwrap();
}

#[test]
fn ranks_waiting_on_a_computing_peer_are_never_flagged() {
    let c = cluster(2, 2, &[]);
    let prog = build(Impl::Mpich, "slow_peer", SLOW_PEER);
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi-check",
            "--on-deadlock",
            "kill",
            "--",
            prog.to_str().unwrap(),
            "3",
        ],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches(" got 42\n").count(), 4, "{stdout}");
    assert!(!stderr.contains("DEADLOCKED"), "{stderr}");
    let job = gangctl_json(&c, &["job", "1"]).unwrap();
    assert!(job.get("deadlock").is_none(), "{job}");
    let metrics = http_get(c.metrics_addr(), "/metrics");
    assert!(
        metrics.contains("gang_jobs_deadlocked_total 0"),
        "{metrics}"
    );
    c.shutdown().unwrap();
}

#[test]
fn the_standard_programs_are_correct_and_never_flagged_under_mpi_check() {
    let prog = crate::programs::program(Impl::Mpich);
    let prog = prog.to_str().unwrap();
    let c = cluster(2, 2, &[]);
    for mode in MODES {
        let out = prun(
            &c,
            &[
                "-n",
                "2x2",
                "--mpi-check",
                "--on-deadlock",
                "kill",
                "--",
                prog,
                mode,
            ],
            None,
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{mode}: {stdout}\n{stderr}");
        check(&stdout, 4, mode);
    }
    c.shutdown().unwrap();
    // Gang-switched at a 10 ms quantum: ranks are stopped inside collectives and
    // receives all the time, and a stopped job looks still. Never a deadlock.
    let c = cluster(2, 2, &["--mpl", "2", "--quantum-ms", "10"]);
    let (a, b) = std::thread::scope(|s| {
        let run = |mode: &'static str| {
            let c = &c;
            s.spawn(move || {
                prun(
                    c,
                    &[
                        "-n",
                        "2x2",
                        "--mpi-check",
                        "--on-deadlock",
                        "kill",
                        "--",
                        prog,
                        mode,
                    ],
                    None,
                )
            })
        };
        let (a, b) = (run("ring"), run("alltoall"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (out, mode) in [(a, "ring"), (b, "alltoall")] {
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{mode} under switching: {stdout}\n{stderr}"
        );
        check(&stdout, 4, mode);
    }
    let metrics = http_get(c.metrics_addr(), "/metrics");
    assert!(
        metrics.contains("gang_jobs_deadlocked_total 0"),
        "{metrics}"
    );
    c.shutdown().unwrap();
}
