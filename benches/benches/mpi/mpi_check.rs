//! What `prun --mpi-check` costs an MPI program: MPI ping-pong latency (ranks 0 and 1 of
//! a 2x1 job) and allreduce time (one double; 2x1 and 2x2 jobs), MPICH under `prun` on
//! a 2x2 loopback cluster (space sharing only: no switching in the measurement), with
//! and without the PMPI checking library; plus a singleton's exchange with itself
//! (Isend, Irecv, Waitall: four wrapped calls), which isolates the wrappers' cost from
//! the machine's noise. Runs alternate with and without, so drift hits both alike.
//!
//! The daemons are not on the measured path (the ranks talk through MPICH alone), so the
//! cluster's binaries are the ones of this profile:
//! `cargo bench -p gang-benches --bench mpi_check` (release) or `--profile dev`.
//!
//! Prints JSON. Env: CASES (comma-separated names; default all), RUNS (default 5), ITERS (default 20000 per run; 1/20 of it for the
//! 2x2 allreduce, 5 times it for the singleton).

use std::path::{Path, PathBuf};
use std::process::Command;

use gang_benches::{env_or, median_p99};

/// argv: MODE ITERS. Rank 0 prints one JSON line: per-iteration median and p99, µs
/// (ping-pong: one way, half a round trip).
const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argv[1];
    int iters = atoi(argv[2]), warm = iters / 10;
    double *t = malloc(sizeof(double) * iters), one = 1.0, sum = 0.0, half = 1.0;
    char b[8] = {0}, in[8];
    for (int i = -warm; i < iters; i++) {
        double t0 = MPI_Wtime();
        if (!strcmp(mode, "pingpong")) {
            half = 0.5;
            if (rank == 0) {
                MPI_Send(b, 8, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(b, 8, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(b, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(b, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        } else if (!strcmp(mode, "allreduce")) {
            MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        } else {
            MPI_Request r[2];
            MPI_Irecv(in, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r[0]);
            MPI_Isend(b, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r[1]);
            MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        }
        if (i >= 0) t[i] = (MPI_Wtime() - t0) * half * 1e6;
    }
    if (rank == 0) {
        qsort(t, iters, sizeof(double), cmp);
        printf("{\"median_us\":%.4f,\"p99_us\":%.4f}\n", t[iters / 2], t[(int)(iters * 0.99)]);
    }
    MPI_Finalize();
    return 0;
}
"#;

/// The daemons of this profile, built if missing.
fn bins() -> PathBuf {
    let dir = gang_local::default_bin_dir().expect("bench location");
    if ["gang-master", "gang-agent", "prun"]
        .iter()
        .all(|b| dir.join(b).is_file())
    {
        return dir;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "gang-master",
        "-p",
        "gang-agent",
        "-p",
        "gang-cli",
    ]);
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("cargo runs").success(),
        "building the daemons failed"
    );
    dir
}

fn build_program(dir: &Path) -> PathBuf {
    let src = dir.join("mpibench.c");
    let exe = dir.join("mpibench");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = Command::new("mpicc.mpich")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("mpicc.mpich runs (sh scripts/setup-test-deps.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The (median, p99) the program printed.
fn figures(out: &std::process::Output, what: &str) -> (f64, f64) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{what}: no JSON line"));
    (
        v["median_us"].as_f64().unwrap(),
        v["p99_us"].as_f64().unwrap(),
    )
}

struct Case {
    name: &'static str,
    shape: Option<&'static str>,
    mode: &'static str,
    /// ITERS times this, over 20: four busy-polling ranks on a 2-core machine take
    /// milliseconds per allreduce, two take a microsecond.
    iters_x20: u32,
}

const CASES: [Case; 4] = [
    Case {
        name: "pingpong_2x1_one_way",
        shape: Some("2x1"),
        mode: "pingpong",
        iters_x20: 20,
    },
    Case {
        name: "allreduce_2x1",
        shape: Some("2x1"),
        mode: "allreduce",
        iters_x20: 20,
    },
    Case {
        name: "allreduce_2x2",
        shape: Some("2x2"),
        mode: "allreduce",
        iters_x20: 1,
    },
    Case {
        name: "singleton_self_exchange",
        shape: None,
        mode: "self",
        iters_x20: 100,
    },
];

fn main() {
    let runs = env_or("RUNS", 5);
    let iters = env_or("ITERS", 20_000u32);
    let bins = bins();
    let tmp = tempfile::tempdir().unwrap();
    let exe = build_program(tmp.path());
    let opts = gang_local::LocalClusterOptions {
        bin_dir: Some(bins.clone()),
        master_args: vec!["--mpl".into(), "1".into()],
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..gang_local::LocalClusterOptions::default()
    };
    let c = gang_local::LocalCluster::start((2, 2), opts).expect("cluster");
    let prun = bins.join("prun");
    // The singleton's library and page, as the agent would make them.
    let lib = gang_mpi_check::install(&tmp.path().join("lib"), gang_mpi_check::Impl::Mpich)
        .expect("the MPICH checking library");
    let page_dir = tmp.path().join("msg");
    std::fs::create_dir(&page_dir).unwrap();
    let run = |case: &Case, checked: bool| -> (f64, f64) {
        let iters = (iters * case.iters_x20 / 20).max(100).to_string();
        let out = match case.shape {
            Some(shape) => {
                let mut args = vec!["-n", shape];
                if checked {
                    args.push("--mpi-check");
                }
                Command::new(&prun)
                    .args(&args)
                    .arg("--")
                    .arg(&exe)
                    .args([case.mode, &iters])
                    .env("GANG_MASTER", c.master_addr())
                    .output()
                    .unwrap()
            }
            None => {
                std::fs::write(page_dir.join("state.page"), [0u8; 4096]).unwrap();
                let mut cmd = Command::new(&exe);
                cmd.args([case.mode, &iters]);
                if checked {
                    cmd.env("LD_PRELOAD", &lib).env("GANG_MSG_DIR", &page_dir);
                }
                cmd.output().unwrap()
            }
        };
        figures(&out, case.name)
    };
    let mut report = serde_json::Map::new();
    let only = std::env::var("CASES").unwrap_or_default();
    for case in CASES
        .iter()
        .filter(|c| only.is_empty() || only.split(',').any(|n| n == c.name))
    {
        run(case, true);
        let mut samples: [[Vec<f64>; 2]; 2] = Default::default();
        for _ in 0..runs {
            for (k, checked) in [false, true].into_iter().enumerate() {
                let (median, p99) = run(case, checked);
                samples[k][0].push(median);
                samples[k][1].push(p99);
            }
        }
        let mut entry = serde_json::Map::new();
        let mut medians = [0.0; 2];
        for (k, label) in ["without", "with_mpi_check"].into_iter().enumerate() {
            let (median, _) = median_p99(&mut samples[k][0]);
            let (p99, _) = median_p99(&mut samples[k][1]);
            medians[k] = median;
            entry.insert(
                label.into(),
                serde_json::json!({"median_us": median, "p99_us": p99, "runs": runs}),
            );
        }
        entry.insert(
            "overhead_median_us".into(),
            serde_json::json!(medians[1] - medians[0]),
        );
        eprintln!(
            "{}: {}",
            case.name,
            serde_json::Value::Object(entry.clone())
        );
        report.insert(case.name.into(), serde_json::Value::Object(entry));
    }
    report.insert("iters".into(), serde_json::json!(iters));
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    c.shutdown().unwrap();
}
