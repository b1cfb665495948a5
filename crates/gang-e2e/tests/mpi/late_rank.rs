//! A rank that starts late (one importing a heavy Python stack, or loading its binary from
//! a slow shared file system): its job's fences wait for it as long as the job lives,
//! under every interface a rank may fence through, on either fence path (among the agents,
//! the default, and through the master), while the job runs a fifth of the wall clock
//! (five jobs share the mesh in five slices).
//!
//! Each job's last rank sleeps [`LATE`] before it starts the program; the others start at
//! once and wait in their first fence (MPI_Init's) all that time. Before fences were long
//! polls, the agent's 5 s call deadline failed them at 5 s (Open MPI: `PML add procs
//! failed --> Returned "Not found"`).

use std::time::{Duration, Instant};

use gang_e2e::{cluster, prun_within, submit, wait_state};

use crate::programs::{Impl, check, text};

/// How late the last rank starts.
const LATE: Duration = Duration::from_secs(60);
/// Each job's whole run: the late start, then the program at a fifth of the wall clock.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// The shell line that runs `"$0" "$@"`, the last rank (1 of 2) after sleeping.
fn late_start() -> String {
    format!(
        "if [ \"$GANG_RANK\" = 1 ]; then sleep {}; fi; exec \"$0\" \"$@\"",
        LATE.as_secs()
    )
}

#[test]
fn a_rank_a_minute_late_completes_its_fences_under_every_interface() {
    // Both fence paths at once, a cluster each.
    std::thread::scope(|s| {
        let paths = ["agents", "master"].map(|p| s.spawn(move || late_jobs(p)));
        for p in paths {
            p.join().unwrap();
        }
    });
}

/// Four jobs, one per interface, each with a rank [`LATE`] late, on a cluster whose
/// fences go `fences` (agents or master).
fn late_jobs(fences: &str) {
    // Five slices: four late jobs and one that only sleeps, each job run a fifth of the
    // time, switched at 100 ms.
    let c = cluster(
        2,
        1,
        &["--mpl", "5", "--quantum-ms", "100", "--fences", fences],
    );
    let sleeper = submit(&c, "2x1", &["sleep", "600"]);
    wait_state(&c, sleeper, "running", Duration::from_secs(60));

    let mpich = crate::programs::program(Impl::Mpich);
    let open_mpi = crate::programs::program(Impl::OpenMpi);
    let pmi2 = crate::pmi2::client();
    let ring = gang_e2e::example("ring");
    let late = late_start();
    // (interface, prun's --mpi, program and its arguments)
    let jobs: [(&str, &str, Vec<String>); 4] = [
        (
            "PMI-1 (MPICH)",
            "pmi1",
            vec![mpich.display().to_string(), "allreduce".into()],
        ),
        (
            "PMI-2 (Slurm's libpmi2)",
            "pmi2",
            vec![pmi2.display().to_string()],
        ),
        (
            "PMIx (Open MPI)",
            "pmix",
            vec![open_mpi.display().to_string(), "allreduce".into()],
        ),
        (
            "the messaging library",
            "none",
            vec![ring.display().to_string(), "--iters".into(), "20".into()],
        ),
    ];
    let t = Instant::now();
    let outs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(what, mpi, prog)| {
                let (c, late) = (&c, &late);
                s.spawn(move || {
                    let mut args = vec!["-n", "2x1", "--mpi", mpi, "--", "sh", "-c", late];
                    args.extend(prog.iter().map(String::as_str));
                    let out = prun_within(c, &args, RUN_DEADLINE);
                    (*what, out, t.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (what, out, took) in outs {
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "fences {fences}, {what}: the job with a rank {LATE:?} late failed ({:?}) after {took:?}:\n{stdout}\n{stderr}",
            out.status
        );
        assert!(took >= LATE, "{what} ended before its late rank started");
        match what {
            "PMI-1 (MPICH)" | "PMIx (Open MPI)" => check(&stdout, 2, "allreduce"),
            "PMI-2 (Slurm's libpmi2)" => {
                for r in 0..2 {
                    assert!(
                        stdout
                            .lines()
                            .any(|l| l.starts_with(&format!("rank {r} of 2 job "))
                                && l.ends_with("errors 0")),
                        "{what}: rank {r}:\n{stdout}\n{stderr}"
                    );
                }
            }
            _ => assert!(
                stdout.contains("\"example\":\"ring\",\"ranks\":2,\"iterations\":20"),
                "{what}:\n{stdout}\n{stderr}"
            ),
        }
        eprintln!("fences {fences}, {what}: completed in {took:?}, a rank {LATE:?} late");
    }
    c.shutdown().unwrap();
}
