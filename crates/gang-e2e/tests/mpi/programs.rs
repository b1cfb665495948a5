//! The test programs: C, written here, built by the test with an MPI implementation's
//! own compiler wrapper (scripts/setup-test-deps.sh installs MPICH and Open MPI).

use std::path::PathBuf;
use std::process::{Command, Output};

/// One program, its mode chosen by argv[1]: every rank prints its rank and the size, and
/// rank 0 prints `RESULT <mode> ok ...` only if every check passed on every rank.
pub const PROGRAM: &str = r#"
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

pub const MODES: [&str; 4] = ["pi", "ring", "allreduce", "alltoall"];

/// An MPI implementation: its compiler wrapper names it (Debian may make either the
/// default `mpicc`, so tests name one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Impl {
    Mpich,
    OpenMpi,
}

impl Impl {
    pub fn mpicc(self) -> &'static str {
        match self {
            Impl::Mpich => "mpicc.mpich",
            Impl::OpenMpi => "mpicc.openmpi",
        }
    }
}

/// Build `source` as `name` with `imp`'s mpicc, once per test binary, in a directory
/// every agent can read.
pub fn build(imp: Impl, name: &str, source: &str) -> PathBuf {
    build_with(imp.mpicc(), name, source)
}

/// [`build`] with the compiler wrapper `mpicc` (a user's plain `mpicc`), in a directory
/// of its own.
pub fn build_with(mpicc: &str, name: &str, source: &str) -> PathBuf {
    type Built = std::collections::HashMap<(String, String), PathBuf>;
    static BUILT: std::sync::Mutex<Option<Built>> = std::sync::Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(Default::default);
    let key = (mpicc.to_string(), name.to_string());
    if let Some(exe) = built.get(&key) {
        return exe.clone();
    }
    let dir = tempfile::Builder::new()
        .prefix("gang-mpi-")
        .tempdir()
        .expect("temp dir")
        .keep();
    let exe = compile(mpicc, &dir, name, source);
    built.insert(key, exe.clone());
    exe
}

/// Build `source` as `dir/name` with the compiler wrapper `mpicc`, every time (`dir` is
/// the caller's: one the ranks' hosts see, for emulated hosts).
pub fn compile(mpicc: &str, dir: &std::path::Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new(mpicc)
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| {
            panic!("{mpicc} does not run ({e}): sh scripts/setup-test-deps.sh installs it")
        });
    assert!(
        out.status.success(),
        "{mpicc} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Whether plain `mpicc` is Open MPI's, as Debian's alternatives make it where both MPIs
/// are installed: only Open MPI's wrapper knows `-showme`.
pub fn plain_mpicc_is_open_mpi() -> bool {
    Command::new("mpicc")
        .arg("-showme:version")
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Open MPI")
        })
}

/// [`PROGRAM`], built with `imp`.
pub fn program(imp: Impl) -> PathBuf {
    build(imp, "mpitest", PROGRAM)
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every rank said hello with the right size, and rank 0 printed a correct result.
pub fn check(stdout: &str, size: u32, mode: &str) {
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

/// Two jobs of `imp`'s test program (ring and alltoall, `mpi_args` before the program) on
/// one 2x2 mesh in two slices, at a 10 and then a 50 ms quantum: both must finish correct
/// (every ring message and all-to-all block checked), and the agents must have reported
/// switches (each is one job leaving the CPUs to the other).
pub fn two_jobs_share_the_mesh_and_finish_correct(imp: Impl, mpi_args: &[&str]) {
    for quantum in ["10", "50"] {
        let c = gang_e2e::cluster(2, 2, &["--mpl", "2", "--quantum-ms", quantum]);
        let prog = program(imp);
        let prog = prog.to_str().unwrap();
        let run = |mode| {
            let args = [&["-n", "2x2"], mpi_args, &["--", prog, mode]].concat();
            gang_e2e::prun(&c, &args, None)
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| run("ring"));
            let b = s.spawn(|| run("alltoall"));
            (a.join().unwrap(), b.join().unwrap())
        });
        for (out, mode) in [(a, "ring"), (b, "alltoall")] {
            let (stdout, stderr) = text(&out);
            assert!(
                out.status.success(),
                "{imp:?} {mode} at {quantum} ms: {stdout}\n{stderr}"
            );
            check(&stdout, 4, mode);
        }
        let switches =
            gang_e2e::wait_for(std::time::Duration::from_secs(10), "switch reports", || {
                let stats = gang_e2e::gangctl_json(&c, &["stats"]).ok()?;
                stats["switches_reported"].as_u64().filter(|&n| n >= 2)
            });
        eprintln!("{imp:?}, quantum {quantum} ms: {switches} switches reported");
        c.shutdown().unwrap();
    }
}

/// `imp`'s test program calling MPI_Abort(3) on a 2x2 cluster (`mpi_args` before the
/// program): prun exits 3 and the job fails with code 3 and a reason naming the
/// interface's abort (`said`: "PMI abort", "PMIx abort") and the code.
pub fn abort_fails_the_job_with_its_code(imp: Impl, mpi_args: &[&str], said: &str) {
    let c = gang_e2e::cluster(2, 2, &[]);
    let prog = program(imp);
    let args = [
        &["-n", "2x2"],
        mpi_args,
        &["--", prog.to_str().unwrap(), "abort"],
    ]
    .concat();
    let out = gang_e2e::prun(&c, &args, None);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    let job = gang_e2e::wait_for(std::time::Duration::from_secs(10), "the failed job", || {
        let jobs = gang_e2e::gangctl_json(&c, &["jobs", "--all"]).ok()?;
        let id = jobs.as_array()?.first()?["id"].as_u64()?;
        Some(gang_e2e::job(&c, id)).filter(|j| j["state"] == "failed")
    });
    let reason = job["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains(said) && reason.contains("exit code 3"),
        "reason: {reason}; job: {job}"
    );
    assert_eq!(job["exit_code"], 3, "{job}");
    c.shutdown().unwrap();
}
