//! Unmodified Open MPI programs under `prun --mpi pmix` (issue #11, PMIx): each agent runs
//! a PMIx server (OpenPMIx's server library), so the ranks of `prun -n WxH ./a.out`,
//! built with `mpicc.openmpi`, find each other as one MPI job without `mpirun`.

use std::time::{Duration, Instant};

use gang_e2e::{cluster, gangctl_json, job, prun, prun_env, wait_for};

use crate::programs::{Impl, MODES, check, text};

fn program() -> std::path::PathBuf {
    crate::programs::program(Impl::OpenMpi)
}

/// Open MPI polls while it waits: with more ranks than cores (a local cluster's 16 nodes
/// on this machine's 2), a rank that does not yield holds its core until the scheduler's
/// tick, and every message between ranks off-CPU waits for one (see the README).
const YIELD: (&str, &str) = ("OMPI_MCA_mpi_yield_when_idle", "1");

/// `prun -n SHAPE --mpi pmix prog MODE` with `env`: every rank's line and rank 0's
/// result.
fn run_mode(
    c: &gang_local::LocalCluster,
    shape: &str,
    size: u32,
    mode: &str,
    env: &[(&str, &str)],
) {
    let prog = program();
    let t = Instant::now();
    let out = prun_env(
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
        env,
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
    // Nothing set by the job: what the agent sets is enough.
    for mode in MODES {
        run_mode(&c, "2x2", 4, mode, &[]);
    }
    // --mpi pmix keeps PMI-1's socket: an MPICH program is one job under it too.
    let mpich = crate::programs::program(Impl::Mpich);
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi",
            "pmix",
            "--",
            mpich.to_str().unwrap(),
            "pi",
        ],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    check(&stdout, 4, "pi");
    // PMIX_SHOW=1 RUST_LOG=info,gang_agent::pmix=debug: rank 0's fences.
    if std::env::var_os("PMIX_SHOW").is_some() {
        let log = std::fs::read_to_string(c.agent_log(0, 0)).unwrap();
        for l in log.lines().filter(|l| l.contains("PMIx")) {
            eprintln!("{l}");
        }
    }
    c.shutdown().unwrap();
}

#[test]
fn open_mpi_programs_run_as_one_job_on_four_by_four() {
    let c = cluster(4, 4, &[]);
    for mode in MODES {
        run_mode(&c, "4x4", 16, mode, &[YIELD]);
    }
    c.shutdown().unwrap();
}

#[test]
fn open_mpi_abort_fails_the_job_with_its_code_and_says_so() {
    let c = cluster(2, 2, &[]);
    let prog = program();
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi",
            "pmix",
            "--",
            prog.to_str().unwrap(),
            "abort",
        ],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    let job = wait_for(Duration::from_secs(10), "the failed job", || {
        let jobs = gangctl_json(&c, &["jobs", "--all"]).ok()?;
        let id = jobs.as_array()?.first()?["id"].as_u64()?;
        Some(job(&c, id)).filter(|j| j["state"] == "failed")
    });
    let reason = job["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("PMIx abort") && reason.contains("exit code 3"),
        "reason: {reason}; job: {job}"
    );
    assert_eq!(job["exit_code"], 3, "{job}");
    c.shutdown().unwrap();
}

#[test]
fn two_open_mpi_jobs_sharing_the_mesh_both_finish_correct_under_gang_switching() {
    let c = cluster(2, 2, &["--mpl", "2", "--quantum-ms", "10"]);
    let prog = program();
    let prog = prog.to_str().unwrap();
    let run = |mode| prun(&c, &["-n", "2x2", "--mpi", "pmix", "--", prog, mode], None);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run("ring"));
        let b = s.spawn(|| run("alltoall"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (out, mode) in [(a, "ring"), (b, "alltoall")] {
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{mode}: {stdout}\n{stderr}");
        check(&stdout, 4, mode);
    }
    // The two jobs had one slice each of the one mesh: every switch the agents report
    // was one of them leaving or entering the CPU while the other ran.
    let switches = wait_for(Duration::from_secs(10), "switch reports", || {
        let stats = gangctl_json(&c, &["stats"]).ok()?;
        stats["switches_reported"].as_u64().filter(|&n| n > 0)
    });
    eprintln!("switches reported: {switches}");
    c.shutdown().unwrap();
}

/// HPC Challenge's input for four processes (P=Q=2), from the Debian example with HPL's N
/// cut from 1000 to 500: the sizes of every other test follow from N (memory 8 N^2
/// bytes), and MPI RandomAccess, the longest, takes about 2 s here instead of 9.
pub const HPCC_INPUT: &str = "HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
500          Ns
1            # of NBs
50           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
2            Ps
2            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
";

#[test]
fn hpcc_runs_to_completion_under_prun_pmix() {
    let hpcc = std::path::Path::new("/usr/bin/hpcc");
    assert!(
        hpcc.exists(),
        "/usr/bin/hpcc missing: sh scripts/setup-test-deps.sh installs it"
    );
    let dir = tempfile::Builder::new()
        .prefix("gang-hpcc-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("hpccinf.txt"), HPCC_INPUT).unwrap();
    let c = cluster(2, 2, &[]);
    let t = Instant::now();
    let out = prun_env(
        &c,
        &[
            "-n",
            "2x2",
            "--mpi",
            "pmix",
            "--",
            "sh",
            "-c",
            "cd \"$0\" && exec /usr/bin/hpcc",
            dir.path().to_str().unwrap(),
        ],
        None,
        &[YIELD],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "hpcc failed:\n{stdout}\n{stderr}");
    let report = std::fs::read_to_string(dir.path().join("hpccoutf.txt")).unwrap();
    eprintln!("hpcc on 2x2: {:?}", t.elapsed());
    assert!(
        report.contains("End of HPC Challenge tests."),
        "hpcc did not finish:\n{report}"
    );
    // The summary: HPL's residual check passed, and it ran as one job of 4.
    assert!(report.contains("\nSuccess=1\n"), "{report}");
    assert!(report.contains("\nCommWorldProcs=4\n"), "{report}");
    assert!(report.contains("\nHPL_N=500\n"), "{report}");
    c.shutdown().unwrap();
}
