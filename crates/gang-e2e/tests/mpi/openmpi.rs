//! Unmodified Open MPI programs under `prun --mpi pmix` (issue #11, PMIx): each agent runs
//! a PMIx server (OpenPMIx's server library), so the ranks of `prun -n WxH ./a.out`,
//! built with `mpicc.openmpi`, find each other as one MPI job without `mpirun`. With no
//! `--mpi` (the default, auto) the agents see that the program links Open MPI and serve
//! it PMIx all the same.

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use gang_e2e::{cluster, prun, prun_env, prun_env_within, prun_in};

use crate::programs::{Impl, MODES, PROGRAM, build_with, check, plain_mpicc_is_open_mpi, text};

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

/// How many of the 2x2 cluster's agents have started their PMIx server: each starts it
/// at its first registration, and logs it.
fn pmix_servers_started(c: &gang_local::LocalCluster) -> usize {
    [(0, 0), (1, 0), (0, 1), (1, 1)]
        .into_iter()
        .filter(|&(x, y)| {
            std::fs::read_to_string(c.agent_log(x, y))
                .unwrap()
                .contains("PMIx server started")
        })
        .count()
}

/// The case: with both MPIs installed, plain `mpicc` is Open MPI's, and
/// `prun -n 2x2 -- ./a.out` with no flag must be one job of 4, not four singletons that
/// exit 0. A plain program before it registers nothing with PMIx (its launch costs what
/// it did), and the Open MPI program under `--mpi pmi1` is refused, naming the fix.
#[test]
fn an_open_mpi_program_built_with_plain_mpicc_is_one_job_with_no_flag() {
    let c = cluster(2, 2, &[]);
    let out = prun(&c, &["-n", "2x2", "--", "true"], None);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(pmix_servers_started(&c), 0, "true registered with PMIx");

    let mpicc = if plain_mpicc_is_open_mpi() {
        "mpicc"
    } else {
        eprintln!("plain mpicc is not Open MPI's here: the program is built with mpicc.openmpi");
        Impl::OpenMpi.mpicc()
    };
    let exe = build_with(mpicc, "a.out", PROGRAM);
    let dir = exe.parent().unwrap();
    let out = prun_in(&c, dir, &["-n", "2x2", "--", "./a.out"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    check(&stdout, 4, "pi");
    assert_eq!(pmix_servers_started(&c), 4, "{stdout}");

    let out = prun_in(&c, dir, &["-n", "2x2", "--mpi", "pmi1", "--", "./a.out"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "cannot start \"./a.out\": it uses Open MPI (needs libmpi.so.40), which finds its \
             peers only through PMIx and would start as singletons under --mpi pmi1: run it \
             with --mpi auto or --mpi pmix"
        ),
        "{stderr}"
    );
    assert!(!stdout.contains("hello rank"), "{stdout}");
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
    crate::programs::abort_fails_the_job_with_its_code(
        Impl::OpenMpi,
        &["--mpi", "pmix"],
        "PMIx abort",
    );
}

/// At a 10 and a 50 ms quantum: SIGSTOP/SIGCONT in mid-run lose nothing and trip no
/// timeout of Open MPI's TCP transport.
#[test]
fn two_open_mpi_jobs_sharing_the_mesh_both_finish_correct_under_gang_switching() {
    crate::programs::two_jobs_share_the_mesh_and_finish_correct(Impl::OpenMpi, &["--mpi", "pmix"]);
}

#[test]
fn an_open_mpi_job_of_an_ordinary_user_finds_its_peers_without_pmix_errors() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (useradd)");
        return;
    }
    // Declared first, dropped last: after the cluster and the ranks running as the user.
    let mut accounts = crate::accounts::Accounts::new();
    let user = accounts.user("px", &[]);
    // The master's socket and the program where the user can reach them.
    let shared = tempfile::Builder::new()
        .prefix("gang-pmix-user-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = shared.path().join("mpitest");
    std::fs::copy(program(), &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = shared.path().join("master.sock");
    let mut opts = gang_e2e::options(&[]);
    opts.socket = Some(socket);
    let c = gang_local::LocalCluster::start((2, 2), opts).expect("cluster");
    let mut cmd = crate::accounts::command_as(&gang_e2e::bin_dir().join("prun"), &user);
    cmd.env("GANG_MASTER", c.master_addr()).args([
        "-n",
        "2x2",
        "--mpi",
        "pmix",
        "--",
        prog.to_str().unwrap(),
        "ring",
    ]);
    let out = crate::accounts::output_within(&mut cmd, gang_e2e::PRUN_DEADLINE);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    check(&stdout, 4, "ring");
    // The library's shared-memory stores belong to the agent's user: a client that tried
    // them would print "PMIX ERROR: ... gds_ds12_lock_pthread.c" (and fall back).
    assert!(!stderr.contains("PMIX ERROR"), "{stderr}");
    c.shutdown().unwrap();
}

/// HPC Challenge's input for four processes (P=Q=2): Debian's example
/// (`/usr/share/doc/hpcc/examples/_hpccinf.txt`) with HPL's N cut from 1000 to 500 and
/// NB from 80 to 50. The sizes of the other tests follow from N (their memory is HPL's,
/// 8 N^2 bytes): MPI RandomAccess, the longest, takes about 2 s here instead of 9, and
/// the whole run about 6 s alone (benches/benches/mpi/hpcc.rs reads it too).
pub const HPCC_INPUT: &str = include_str!("hpccinf.txt");

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
    // 5 s alone; beside two busy processes on this 2-core host, four ranks that wait
    // for each other in HPL took over 60 s (before this session's changes too).
    let out = prun_env_within(
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
        &[YIELD],
        std::time::Duration::from_secs(400),
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

/// Two clusters on one host each run their job 1: the MPI libraries are given different
/// names for them (PMI's jobid, PMIx's namespace), made from each master's state database.
/// Open MPI names its session directory and shared-memory files after the namespace, and
/// two jobs that shared one (`gang-1` of two test clusters running side by side) broke
/// each other's `MPI_Init` ("PML add procs failed ... Not found") or hung.
#[test]
fn jobs_of_two_clusters_on_one_host_never_share_an_mpi_namespace() {
    let clusters = [cluster(1, 1, &[]), cluster(1, 1, &[])];
    let mut names = Vec::new();
    for c in &clusters {
        for (mpi, var) in [("pmi1", "PMI_JOBID"), ("pmix", "PMIX_NAMESPACE")] {
            let script = format!("echo ${var}");
            let out = prun(
                c,
                &["-n", "1", "--mpi", mpi, "--", "sh", "-c", &script],
                None,
            );
            let (stdout, err) = text(&out);
            assert!(out.status.success(), "{mpi}: {stdout}\n{err}");
            names.push((mpi, stdout.trim().to_string()));
        }
    }
    // Jobs 1 and 2 of the first cluster, then of the second.
    let shape = |n: &str, job: u32| {
        let id = n
            .strip_prefix("gang-")
            .and_then(|r| r.strip_suffix(&format!("-{job}")));
        id.is_some_and(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    for (i, (mpi, n)) in names.iter().enumerate() {
        assert!(
            shape(n, i as u32 % 2 + 1),
            "{mpi}: {n:?} is not gang-CLUSTER-JOB"
        );
    }
    assert_eq!(names[0].1[..13], names[1].1[..13], "one cluster, one id");
    assert_ne!(names[0].1, names[2].1, "job 1 of two clusters: {names:?}");
    for c in clusters {
        c.shutdown().unwrap();
    }
}
