//! Unmodified Open MPI programs under `prun --mpi pmix` (issue #11, PMIx): each agent runs
//! a PMIx server (OpenPMIx's server library), so the ranks of `prun -n WxH ./a.out`,
//! built with `mpicc.openmpi`, find each other as one MPI job without `mpirun`.

use std::time::{Duration, Instant};

use gang_e2e::{cluster, gangctl_json, job, prun, wait_for};

use crate::programs::{Impl, MODES, check, text};

fn program() -> std::path::PathBuf {
    crate::programs::program(Impl::OpenMpi)
}

/// `prun -n SHAPE --mpi pmix prog MODE`: every rank's line and rank 0's result.
fn run_mode(c: &gang_local::LocalCluster, shape: &str, size: u32, mode: &str) {
    let prog = program();
    let t = Instant::now();
    let out = prun(
        c,
        &[
            "-n",
            shape,
            "--mpi",
            "pmix",
            "--",
            prog.to_str().unwrap(),
            mode,
        ],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{mode} on {shape} failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    check(&stdout, size, mode);
    eprintln!("{mode} on {shape}: {:?}", t.elapsed());
}

#[test]
fn open_mpi_programs_run_as_one_job_on_two_by_two() {
    let c = cluster(2, 2, &[]);
    for mode in MODES {
        run_mode(&c, "2x2", 4, mode);
    }
    c.shutdown().unwrap();
}
