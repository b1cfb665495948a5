//! MPI under `prun` (issue #11), real clusters of release binaries, MPICH programs built
//! with `mpicc.mpich` (benches/mpi/*.c):
//!
//! (1) launch: from spawning the launcher to MPI_Init done on every rank (each rank prints
//!     the wall clock right after MPI_Init), and to the launcher's exit, at 4 and 16
//!     ranks: `prun -n 2x2` / `-n 4x4` against `mpiexec.hydra -n 4` / `-n 16` on the same
//!     host, interleaved run by run so noise hits both alike;
//! (2) the PMI fence across 4 and 16 ranks, timed by Slurm's libpmi2 client (FENCES rounds
//!     of a put and `PMI2_KVS_Fence`): each rank's one 450-byte business card (what MPICH
//!     puts), and a space that grows by one card per rank per round;
//! (3) ping-pong round trip (8 bytes) and allreduce (two doubles) between the two ranks of
//!     a 2x1 job, for RUN_SECONDS each, with gang switching off (the job alone) and on (a
//!     CPU-bound 2x2 job shares the mesh in the other slice; quantum 10 and 50 ms). Two
//!     ranks on this 2-core host: more would measure MPICH's busy polling on oversubscribed
//!     cores, not switching. Every operation is timed: the median shows the cost inside a
//!     slot, p99/max the operations a switch-out held, and `ops_per_s` the share of time.
//!
//! Prints JSON. Env: RUNS (launch runs per case, default 20), FENCES (default 50),
//! RUN_SECONDS (per timed run, default 2), REPEATS (per switching case, default 3).

use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use gang_benches::{build_c, env_or, median_p99, release_bins};
use gang_local::{LocalCluster, LocalClusterOptions};

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

fn cluster(bins: &Path, mesh: (u32, u32), master_args: &[&str]) -> LocalCluster {
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.to_path_buf()),
        master_args: master_args.iter().map(|s| s.to_string()).collect(),
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    LocalCluster::start(mesh, opts).expect("cluster")
}

/// Run a launcher; (ms to the last rank's MPI_Init, ms to its exit).
fn launch(cmd: &mut Command, ranks: usize) -> (f64, f64) {
    let t0 = now_ns();
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let total = start.elapsed().as_secs_f64() * 1e3;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cmd:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inits: Vec<i128> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("INIT "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(inits.len(), ranks, "every rank past MPI_Init: {stdout}");
    let last = inits.into_iter().max().unwrap();
    ((last - t0) as f64 / 1e6, total)
}

fn ms(xs: &mut [f64]) -> serde_json::Value {
    let (median, p99) = median_p99(xs);
    serde_json::json!({"median_ms": median, "p99_ms": p99, "min_ms": xs[0], "runs": xs.len()})
}

/// The JSON line a timed program prints.
fn timed(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cmd:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line: {stdout}"))
}

fn prun(bins: &Path, c: &LocalCluster, args: &[&str]) -> Command {
    let mut cmd = Command::new(bins.join("prun"));
    cmd.args(args).env("GANG_MASTER", c.master_addr());
    cmd
}

/// (1) launch: `prun` against `mpiexec.hydra`, to every rank past MPI_Init and to exit.
fn launch_figures(
    bins: &Path,
    c: &LocalCluster,
    shape: &str,
    ranks: usize,
    mpi: &str,
    runs: usize,
) -> serde_json::Value {
    let n = ranks.to_string();
    let (mut p_init, mut p_total, mut h_init, mut h_total) = (vec![], vec![], vec![], vec![]);
    launch(&mut prun(bins, c, &["-n", shape, "--", mpi, "init"]), ranks);
    for _ in 0..runs {
        let (i, t) = launch(&mut prun(bins, c, &["-n", shape, "--", mpi, "init"]), ranks);
        p_init.push(i);
        p_total.push(t);
        let mut hydra = Command::new("mpiexec.hydra");
        hydra.args(["-n", &n, mpi, "init"]);
        let (i, t) = launch(&mut hydra, ranks);
        h_init.push(i);
        h_total.push(t);
    }
    let (pm, _) = median_p99(&mut p_init.clone());
    let (hm, _) = median_p99(&mut h_init.clone());
    serde_json::json!({
        "prun_to_all_past_mpi_init": ms(&mut p_init),
        "prun_to_exit": ms(&mut p_total),
        "mpiexec_hydra_to_all_past_mpi_init": ms(&mut h_init),
        "mpiexec_hydra_to_exit": ms(&mut h_total),
        "prun_over_hydra_median": pm / hm,
    })
}

/// The other slice's job: every node busy computing until cancelled. Its id.
fn hog(bins: &Path, c: &LocalCluster) -> String {
    let h = prun(
        bins,
        c,
        &[
            "-n",
            "2x2",
            "--detach",
            "--",
            "sh",
            "-c",
            "while :; do :; done",
        ],
    )
    .output()
    .unwrap();
    assert!(h.status.success(), "{}", String::from_utf8_lossy(&h.stderr));
    String::from_utf8_lossy(&h.stdout).trim().to_string()
}

fn cancel(bins: &Path, c: &LocalCluster, id: &str) {
    let st = Command::new(bins.join("gangctl"))
        .args(["cancel", id])
        .env("GANG_MASTER", c.master_addr())
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// (3) `what` (pingpong, allreduce) for `seconds`, `repeats` times, beside a hog in the
/// other slice when switching is on: the medians over the repeats.
fn switching_case(
    bins: &Path,
    c: &LocalCluster,
    switched: bool,
    mpi: &str,
    what: &str,
    seconds: f64,
    repeats: usize,
) -> serde_json::Value {
    let secs = seconds.to_string();
    let mut rows = Vec::new();
    for _ in 0..repeats {
        let hog = switched.then(|| hog(bins, c));
        rows.push(timed(&mut prun(
            bins,
            c,
            &["-n", "2x1", "--", mpi, what, &secs],
        )));
        if let Some(id) = &hog {
            cancel(bins, c, id);
        }
    }
    let field = |k: &str| {
        let mut xs: Vec<f64> = rows.iter().filter_map(|r| r[k].as_f64()).collect();
        median_p99(&mut xs).0
    };
    serde_json::json!({
        "median_us": field("median_us"),
        "p99_us": field("p99_us"),
        "mean_us": field("mean_us"),
        "max_us": field("max_us"),
        "ops_per_s": field("n") / seconds,
        "repeats": rows.len(),
    })
}

fn main() {
    let runs = env_or("RUNS", 20);
    let fences = env_or("FENCES", 50).to_string();
    let seconds = env_or("RUN_SECONDS", 2.0f64);
    let repeats = env_or("REPEATS", 3);
    let bins = release_bins();
    let mpi = build_c("mpicc.mpich", "mpibench", &[]);
    let fence = build_c("cc", "pmi2_fence", &["-lpmi2"]);
    let mpi = mpi.to_str().unwrap();
    let fence = fence.to_str().unwrap();
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), "mpi".into());

    // (1) launch and (2) fence, at 4 and 16 ranks.
    for (mesh, shape, ranks) in [((2, 2), "2x2", 4usize), ((4, 4), "4x4", 16)] {
        let c = cluster(&bins, mesh, &[]);
        out.insert(
            format!("launch_{ranks}_ranks"),
            launch_figures(&bins, &c, shape, ranks, mpi, runs),
        );
        for (space, arg) in [("one_card_per_rank", "card"), ("growing", "grow")] {
            let f = timed(&mut prun(
                &bins,
                &c,
                &["-n", shape, "--mpi", "pmi2", "--", fence, &fences, arg],
            ));
            out.insert(format!("pmi_fence_{ranks}_ranks_{space}"), f);
        }
        c.shutdown().unwrap();
    }

    // (3) switching off and on.
    let mut switching = serde_json::Map::new();
    for quantum in [None, Some(10), Some(50)] {
        let q = quantum.unwrap_or(50).to_string();
        let c = cluster(&bins, (2, 2), &["--mpl", "2", "--quantum-ms", &q]);
        let name = match quantum {
            None => "off".to_string(),
            Some(q) => format!("on_quantum_{q}ms"),
        };
        let mut cases = serde_json::Map::new();
        for what in ["pingpong", "allreduce"] {
            let case = switching_case(&bins, &c, quantum.is_some(), mpi, what, seconds, repeats);
            cases.insert(what.into(), case);
        }
        switching.insert(name, cases.into());
        c.shutdown().unwrap();
    }
    out.insert("switching".into(), switching.into());
    out.insert("seconds_per_run".into(), seconds.into());
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
