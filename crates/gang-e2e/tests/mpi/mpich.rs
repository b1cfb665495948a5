//! Unmodified MPICH programs under `prun` (issue #11, PMI-1): the agents serve the PMI-1
//! simple wire protocol, so the ranks of `prun -n WxH ./a.out` find each other as one
//! MPI job instead of starting as singletons. The programs are built with `mpicc.mpich`
//! and run with no `--mpi`: the default, auto, which gives every rank the simple
//! protocol (and PMIx only to programs that may need it).

use std::time::Instant;

use gang_e2e::{cluster, prun};

use crate::programs::{Impl, MODES, check, text};

fn program() -> std::path::PathBuf {
    crate::programs::program(Impl::Mpich)
}

/// `prun -n SHAPE prog MODE`: must succeed with every rank's line and rank 0's result.
fn run_mode(c: &gang_local::LocalCluster, shape: &str, size: u32, mode: &str) {
    let prog = program();
    let t = Instant::now();
    let out = prun(c, &["-n", shape, "--", prog.to_str().unwrap(), mode], None);
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
fn mpich_programs_run_as_one_job_on_two_by_two() {
    let c = cluster(2, 2, &[]);
    for mode in MODES {
        run_mode(&c, "2x2", 4, mode);
    }
    // PMI_SHOW=1 RUST_LOG=info,gang_agent::pmi=debug: rank 0's PMI lines and barriers.
    if std::env::var_os("PMI_SHOW").is_some() {
        let log = std::fs::read_to_string(c.agent_log(0, 0)).unwrap();
        for l in log.lines().filter(|l| l.contains("PMI")) {
            eprintln!("{l}");
        }
    }
    // --mpi none: no PMI, so MPICH starts four singletons.
    let prog = program();
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi",
            "none",
            "--",
            prog.to_str().unwrap(),
            "pi",
        ],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("hello rank 0 of 1\n").count(), 4, "{stdout}");
    c.shutdown().unwrap();
}

#[test]
fn mpich_programs_run_as_one_job_on_four_by_four() {
    let c = cluster(4, 4, &[]);
    for mode in MODES {
        run_mode(&c, "4x4", 16, mode);
    }
    c.shutdown().unwrap();
}

#[test]
fn mpi_abort_fails_the_job_with_its_code_and_says_so() {
    crate::programs::abort_fails_the_job_with_its_code(Impl::Mpich, &[], "PMI abort");
}

/// Two MPI jobs, one slice each of one 2x2 mesh, at a 10 and a 50 ms quantum: SIGSTOP
/// and SIGCONT in mid-run lose nothing (every ring message and all-to-all block checked)
/// and trip no timeout of MPICH's transport.
#[test]
fn two_mpi_jobs_sharing_the_mesh_both_finish_correct_under_gang_switching() {
    crate::programs::two_jobs_share_the_mesh_and_finish_correct(Impl::Mpich, &[]);
}
