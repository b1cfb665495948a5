//! A soak of real MPI across four hosts under switching: an MPICH program (ch4:ucx, TCP
//! between the hosts) and an Open MPI one (ob1, btl/tcp) share the 2x2 mesh in two slices
//! of 10 ms, each doing all-to-all and allreduce work with every word checked, round
//! after round, with fences among the agents (the default) and through the master.
//!
//! What it guards: MPICH 4.0's `MPI_Finalize` hung here once fences waited for late ranks
//! (a rank in the PMI barrier's blocking read never answered a peer's UCX flush; the
//! agent's README, "Fences"); the PMI progress shim ends that. A hang is a job not done
//! within [`JOB_DEADLINE`]: prun is killed and the round fails.

use std::time::{Duration, Instant};

use crate::hosts_keys;
use crate::programs::{Impl, PROGRAM, check, compile, text};

/// Rounds per fence path: `SOAK_ROUNDS` (default 50).
fn rounds() -> usize {
    std::env::var("SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// One job's whole run, sharing the mesh: a fraction of a second alone.
const JOB_DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn mpich_and_open_mpi_sharing_four_hosts_under_ten_ms_switching_never_hang() {
    let dir = crate::shared_dir("soak-");
    let mpich = compile(Impl::Mpich.mpicc(), dir.path(), "soak-mpich", PROGRAM);
    let open_mpi = compile(Impl::OpenMpi.mpicc(), dir.path(), "soak-openmpi", PROGRAM);
    let rounds = rounds();
    for fences in ["agents", "master"] {
        let c = hosts_keys(
            2,
            2,
            4,
            vec![
                ("quantum_ms".into(), toml::Value::Integer(10)),
                ("mpl".into(), toml::Value::Integer(2)),
                ("fences".into(), toml::Value::String(fences.into())),
            ],
        );
        let t = Instant::now();
        let mut slowest = Duration::ZERO;
        for round in 0..rounds {
            // Each program does both kinds of work, in turn.
            let (a, b) = if round % 2 == 0 {
                ("alltoall", "allreduce")
            } else {
                ("allreduce", "alltoall")
            };
            let runs = [(&mpich, a, "MPICH"), (&open_mpi, b, "Open MPI")];
            let outs: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = runs
                    .iter()
                    .map(|(prog, mode, what)| {
                        let c = &c;
                        s.spawn(move || {
                            let started = Instant::now();
                            let prog = prog.display().to_string();
                            let out = gang_e2e::prun_within(
                                c,
                                &["-n", "2x2", "--", &prog, mode],
                                JOB_DEADLINE,
                            );
                            (*what, *mode, out, started.elapsed())
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (what, mode, out, took) in outs {
                let (stdout, stderr) = text(&out);
                assert!(
                    out.status.success(),
                    "fences {fences}, round {round}: {what} {mode} failed or hung ({:?}) after {took:?}:\n{stdout}\n{stderr}",
                    out.status
                );
                check(&stdout, 4, mode);
                slowest = slowest.max(took);
            }
        }
        eprintln!(
            "fences {fences}: {rounds} rounds of both programs in {:?}, the slowest job {slowest:?}",
            t.elapsed()
        );
        c.shutdown().unwrap();
    }
    drop(dir);
}
