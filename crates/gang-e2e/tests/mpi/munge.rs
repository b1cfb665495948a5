//! MPI where MUNGE runs, as at every Slurm site, and where it does not. With munged
//! answering, OpenPMIx offers its `munge` module first and an Open MPI rank picks it; the
//! agent's gate checks only `native` (against the kernel's record of who owns the
//! socket), and every Open MPI job died in `MPI_Init`. The agent now has the library offer
//! `native` alone and tells the ranks so; here Open MPI (a C program, mpi4py) and MPICH
//! run with munged answering (and Slurm's client tools on PATH), and on a cluster whose
//! agents cannot see munged.

use std::path::Path;
use std::process::Command;

use gang_e2e::{cluster, prun};

use crate::programs::{Impl, check, text};

/// Whether munged answers a process of this thread's mount namespace.
fn munged_answers() -> bool {
    Command::new("munge")
        .arg("-n")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// mpi4py's allreduce and every rank's line, as the C program's `check` reads them.
const MPI4PY: &str = r#"
from mpi4py import MPI
c = MPI.COMM_WORLD
r, n = c.Get_rank(), c.Get_size()
print(f"hello rank {r} of {n}", flush=True)
s = c.allreduce(r + 1, op=MPI.SUM)
if r == 0:
    ok = s == n * (n + 1) // 2
    print(f"RESULT allreduce {'ok' if ok else 'WRONG'} sum={s}", flush=True)
"#;

/// Open MPI (built with `mpicc.openmpi`, which Debian's plain `mpicc` is unless MPICH's
/// alternative was chosen), mpi4py, and MPICH, each as one 2-rank job: every rank's line
/// and the result.
fn run_each(c: &gang_local::LocalCluster, dir: &Path) {
    let open_mpi = crate::programs::program(Impl::OpenMpi);
    let script = dir.join("allreduce.py");
    std::fs::write(&script, MPI4PY).unwrap();
    let mpich = crate::programs::program(Impl::Mpich);
    let jobs: [(&str, Vec<&str>, &str); 3] = [
        (
            "Open MPI",
            vec![open_mpi.to_str().unwrap(), "allreduce"],
            "allreduce",
        ),
        // Debian's python3, which python3-mpi4py is for (a PATH may name another first).
        (
            "mpi4py",
            vec!["/usr/bin/python3", script.to_str().unwrap()],
            "allreduce",
        ),
        (
            "MPICH",
            vec![mpich.to_str().unwrap(), "allreduce"],
            "allreduce",
        ),
    ];
    for (what, argv, mode) in jobs {
        // No --mpi: auto, as a user runs them (PMIx for the program that links Open MPI,
        // and for the script, whose interpreter may load it).
        let mut args = vec!["-n", "2x1", "--"];
        args.extend(argv);
        let out = prun(c, &args, None);
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{what}: {:?}\n{stdout}\n{stderr}",
            out.status
        );
        check(&stdout, 2, mode);
    }
}

/// Slurm's own srun is on PATH, as at a site (slurm-client): nothing here may take it
/// for prun.
fn slurms_srun_is_beside() -> bool {
    Command::new("sh")
        .args(["-c", "command -v srun"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn mpi_jobs_run_where_munged_answers() {
    assert!(
        munged_answers(),
        "munged does not answer here: sh scripts/setup-test-deps.sh installs and starts it"
    );
    assert!(
        slurms_srun_is_beside(),
        "Slurm's srun is not on PATH: sh scripts/setup-test-deps.sh installs slurm-client"
    );
    let dir = tempfile::tempdir().unwrap();
    let c = cluster(2, 1, &[]);
    run_each(&c, dir.path());
    c.shutdown().unwrap();
}

#[test]
fn mpi_jobs_run_where_munged_is_out_of_sight() {
    // A thread of its own, in a mount namespace of its own where /run/munge is an empty
    // directory: the agents it starts, and their ranks, find no munged.
    std::thread::spawn(|| {
        use nix::mount::{MsFlags, mount};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("a mount namespace");
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        std::fs::create_dir_all("/run/munge").unwrap();
        mount(
            Some("tmpfs"),
            "/run/munge",
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        assert!(!munged_answers(), "munged still answers in the namespace");
        let dir = tempfile::tempdir().unwrap();
        let c = cluster(2, 1, &[]);
        run_each(&c, dir.path());
        c.shutdown().unwrap();
    })
    .join()
    .unwrap();
}
