//! Unmodified MPICH programs under `prun` (issue #11, PMI-1): the agents serve the PMI-1
//! simple wire protocol, so the ranks of `prun -n WxH ./a.out` find each other as one
//! MPI job instead of starting as singletons. The programs are C, written here and built
//! by the test with `mpicc.mpich` (scripts/setup-test-deps.sh installs MPICH).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Instant;

use gang_e2e::{cluster, gangctl_json, job, prun, wait_for};

/// One program, its mode chosen by argv[1]: every rank prints its rank and the size, and
/// rank 0 prints `RESULT <mode> ok ...` only if every check passed on every rank.
const PROGRAM: &str = r#"
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

/* Every rank's error count, summed at rank 0. */
static int total(int errors) {
    int sum = 0;
    MPI_Reduce(&errors, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum;
}

static void pi(void) {
    const long n = 2000000;
    double h = 1.0 / n, part = 0.0, sum = 0.0;
    for (long i = rank; i < n; i += size) {
        double x = h * (i + 0.5);
        part += 4.0 / (1.0 + x * x);
    }
    part *= h;
    MPI_Reduce(&part, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double err = fabs(sum - 3.14159265358979323846);
        printf("RESULT pi %s value=%.12f error=%.3e\n", err < 1e-9 ? "ok" : "WRONG", sum, err);
    }
}

static void ring(void) {
    enum { LEN = 4096, LAPS = 20 };
    int *out = malloc(LEN * sizeof(int)), *in = malloc(LEN * sizeof(int));
    int right = (rank + 1) % size, left = (rank + size - 1) % size, errors = 0;
    for (int lap = 0; lap < LAPS; lap++) {
        /* A token around the ring: each rank adds its rank. */
        int token = 0;
        if (rank == 0) {
            token = lap;
            MPI_Send(&token, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (token != lap + size * (size - 1) / 2) errors++;
        } else {
            MPI_Recv(&token, 1, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
        }
        /* A block to the right, every word checked on arrival. */
        for (int i = 0; i < LEN; i++) out[i] = rank * 1000003 + lap * 7919 + i;
        MPI_Sendrecv(out, LEN, MPI_INT, right, 2, in, LEN, MPI_INT, left, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (int i = 0; i < LEN; i++)
            if (in[i] != left * 1000003 + lap * 7919 + i) errors++;
    }
    int sum = total(errors);
    if (rank == 0) printf("RESULT ring %s laps=%d errors=%d\n", sum == 0 ? "ok" : "WRONG", LAPS, sum);
}

static void allreduce(void) {
    enum { LEN = 1000 };
    long v[LEN], r[LEN];
    int errors = 0;
    for (int iter = 0; iter < 50; iter++) {
        for (int i = 0; i < LEN; i++) v[i] = (long)rank * i + iter;
        MPI_Allreduce(v, r, LEN, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < LEN; i++)
            if (r[i] != (long)size * (size - 1) / 2 * i + (long)size * iter) errors++;
    }
    int sum = total(errors);
    if (rank == 0) printf("RESULT allreduce %s errors=%d\n", sum == 0 ? "ok" : "WRONG", sum);
}

static void alltoall(void) {
    enum { PER = 256 };
    int *out = malloc(size * PER * sizeof(int)), *in = malloc(size * PER * sizeof(int));
    int errors = 0;
    for (int iter = 0; iter < 20; iter++) {
        for (int j = 0; j < size; j++)
            for (int k = 0; k < PER; k++) out[j * PER + k] = (rank * 1000 + j) * 1000 + k + iter;
        MPI_Alltoall(out, PER, MPI_INT, in, PER, MPI_INT, MPI_COMM_WORLD);
        for (int j = 0; j < size; j++)
            for (int k = 0; k < PER; k++)
                if (in[j * PER + k] != (j * 1000 + rank) * 1000 + k + iter) errors++;
    }
    int sum = total(errors);
    if (rank == 0) printf("RESULT alltoall %s errors=%d\n", sum == 0 ? "ok" : "WRONG", sum);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello rank %d of %d\n", rank, size);
    fflush(stdout);
    const char *mode = argc > 1 ? argv[1] : "pi";
    if (!strcmp(mode, "pi")) pi();
    else if (!strcmp(mode, "ring")) ring();
    else if (!strcmp(mode, "allreduce")) allreduce();
    else if (!strcmp(mode, "alltoall")) alltoall();
    else if (!strcmp(mode, "abort")) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) MPI_Abort(MPI_COMM_WORLD, 3);
        /* The others wait to be killed with the job. */
        for (;;) MPI_Barrier(MPI_COMM_WORLD);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
"#;

const MODES: [&str; 4] = ["pi", "ring", "allreduce", "alltoall"];

/// Build the program once per test binary, in a directory every agent can read.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("gang-mpi-")
                .tempdir()
                .expect("temp dir")
                .keep();
            let src = dir.join("mpitest.c");
            std::fs::write(&src, PROGRAM).unwrap();
            let exe = dir.join("mpitest");
            // Debian may make Open MPI the default mpicc: name MPICH's.
            let out = Command::new("mpicc.mpich")
                .arg("-O2")
                .arg("-o")
                .arg(&exe)
                .arg(&src)
                .arg("-lm")
                .output()
                .expect("mpicc.mpich runs (sh scripts/setup-test-deps.sh installs MPICH)");
            assert!(
                out.status.success(),
                "mpicc.mpich failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            exe
        })
        .clone()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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

fn check(stdout: &str, size: u32, mode: &str) {
    for r in 0..size {
        assert!(
            stdout.contains(&format!("hello rank {r} of {size}\n")),
            "rank {r} of {size} missing (singletons?):\n{stdout}"
        );
    }
    assert!(
        stdout.contains(&format!("RESULT {mode} ok")),
        "{mode}: no correct result:\n{stdout}"
    );
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
    let c = cluster(2, 2, &[]);
    let prog = program();
    let out = prun(
        &c,
        &["-n", "2x2", "--", prog.to_str().unwrap(), "abort"],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    let job = wait_for(std::time::Duration::from_secs(10), "the failed job", || {
        let jobs = gangctl_json(&c, &["jobs", "--all"]).ok()?;
        let id = jobs.as_array()?.first()?["id"].as_u64()?;
        Some(job(&c, id)).filter(|j| j["state"] == "failed")
    });
    let reason = job["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("PMI abort") && reason.contains("exit code 3"),
        "reason: {reason}; job: {job}"
    );
    assert_eq!(job["exit_code"], 3, "{job}");
    c.shutdown().unwrap();
}

#[test]
fn two_mpi_jobs_sharing_the_mesh_both_finish_correct_under_gang_switching() {
    let c = cluster(2, 2, &["--mpl", "2", "--quantum-ms", "10"]);
    let prog = program();
    let prog = prog.to_str().unwrap();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| prun(&c, &["-n", "2x2", "--", prog, "ring"], None));
        let b = s.spawn(|| prun(&c, &["-n", "2x2", "--", prog, "alltoall"], None));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (out, mode) in [(a, "ring"), (b, "alltoall")] {
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{mode}: {stdout}\n{stderr}");
        check(&stdout, 4, mode);
    }
    c.shutdown().unwrap();
}
