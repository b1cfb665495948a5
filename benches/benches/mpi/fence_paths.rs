//! Where a job's fences go ("10,000 nodes on one master": fences off the master): the
//! same PMI-2 fence program (benches/mpi/pmi2_fence.c, through Slurm's libpmi2: rounds of
//! one 450-byte business card per rank and a fence) on 4 and 16 real agents, with
//! `--fanout-width 0` (every fence through the master, the default) and `--fences agents`
//! at widths 2 and 16 (gathered among the job's agents, the master told only that each
//! completed), the clusters side
//! by side in one run. For each: the bytes of fence messages through the master per
//! fence (its `gang_fence_bytes_total`), the master's CPU per fence, and the fence time
//! as rank 0 sees it (median, p99).
//!
//! Needs the release binaries (`cargo build --release -p gang-master -p gang-agent -p
//! gang-cli`) and libpmi2 (`scripts/setup-test-deps.sh`). Env: FENCES (rounds per run,
//! default 200), RUNS (per case, default 3). Prints one JSON line per case.

use std::process::Command;

use gang_benches::{build_c, env_or, median_p99, metric_sum, prebuilt_release_bins, proc_cpu};
use gang_local::{LocalCluster, LocalClusterOptions};

fn main() {
    let fences: usize = env_or("FENCES", 200);
    let runs: usize = env_or("RUNS", 3);
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "gangctl", "prun"]);
    let program = build_c("cc", "pmi2_fence", &["-lpmi2"]);
    for (shape, mesh) in [("2x2", (2, 2)), ("4x4", (4, 4))] {
        for width in ["0", "2", "16"] {
            let opts = LocalClusterOptions {
                bin_dir: Some(bins.clone()),
                master_args: if width == "0" {
                    vec!["--fanout-width".into(), width.into()]
                } else {
                    ["--fanout-width", width, "--fences", "agents"]
                        .map(String::from)
                        .to_vec()
                },
                env: vec![("RUST_LOG".into(), "warn".into())],
                ..LocalClusterOptions::default()
            };
            let mut c = LocalCluster::start(mesh, opts).expect("cluster");
            let master = c.master_pid().expect("master");
            let (mut medians, mut p99s) = (vec![], vec![]);
            let path_bytes = |c: &LocalCluster| {
                (
                    metric_sum(c, "gang_fence_bytes_total", "path=\"master\""),
                    metric_sum(c, "gang_fence_bytes_total", "path=\"agents\""),
                )
            };
            let (b0, cpu0) = (path_bytes(&c), proc_cpu(master).0);
            for _ in 0..runs {
                let out = Command::new(bins.join("prun"))
                    .args(["-n", shape, "--mpi", "pmi2", "--"])
                    .arg(&program)
                    .args([&fences.to_string(), "card"])
                    .env("GANG_MASTER", c.master_addr())
                    .output()
                    .expect("prun runs");
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let line: serde_json::Value = stdout
                    .lines()
                    .find_map(|l| serde_json::from_str(l).ok())
                    .expect("the program's JSON line");
                medians.push(line["median_us"].as_f64().unwrap_or(f64::NAN));
                p99s.push(line["p99_us"].as_f64().unwrap_or(f64::NAN));
            }
            let (b1, cpu1) = (path_bytes(&c), proc_cpu(master).0);
            // Each run: FENCES timed fences and the untimed first.
            let per_fence = (runs * (fences + 1)) as f64;
            let (median_us, _) = median_p99(&mut medians);
            let (p99_median_us, _) = median_p99(&mut p99s);
            let line = serde_json::json!({
                "bench": "fence_paths",
                "ranks": mesh.0 * mesh.1,
                "fanout_width": width,
                "fences": runs * (fences + 1),
                "master_bytes_per_fence": ((b1.0 - b0.0) + (b1.1 - b0.1)) / per_fence,
                "master_cpu_us_per_fence": (cpu1 - cpu0) * 1e6 / per_fence,
                "fence_us": {"median_of_run_medians": median_us, "median_of_run_p99s": p99_median_us},
            });
            println!("{line}");
            c.shutdown().expect("shutdown");
        }
    }
}
