//! Shared fixtures for the benchmarks.

pub mod cores;

use std::path::{Path, PathBuf};

use gang_core::quantile::nearest_rank;
use gang_core::{Occupancy, Shape, Submesh};

/// Where the shared workload traces live (beside the repository).
pub fn trace(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    assert!(p.exists(), "trace not found: {}", p.display());
    p
}

/// A benchmark knob from the environment, or its default.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Build the release binaries of the daemons and CLIs; their directory.
pub fn release_bins() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "gang-master",
            "-p",
            "gang-agent",
            "-p",
            "gang-cli",
        ])
        .status()
        .expect("cargo runs");
    assert!(st.success(), "building the release binaries failed");
    // Where cargo put them: CARGO_TARGET_DIR if the build was told one.
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
        .join("release")
}

/// The directory of release binaries that are already built (`target/release`, or under
/// `CARGO_TARGET_DIR`), for a bench that must not rebuild them (a build would share the
/// machine with the timed runs). If any of `names` is missing there, says how to build
/// them and exits with status 2.
pub fn prebuilt_release_bins(names: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
        .join("release");
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !dir.join(n).is_file())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "missing release binaries in {}: {}\nbuild them first:\n  cargo build --release -p gang-master -p gang-agent -p gang-cli",
            dir.display(),
            missing.join(", ")
        );
        std::process::exit(2);
    }
    dir
}

/// A release build of an example of `gang-msg` (a job program), next to the binaries.
pub fn msg_example(bins: &Path, name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = std::process::Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--release", "-p", "gang-msg", "--example", name])
        .status()
        .expect("cargo runs");
    assert!(st.success(), "building the {name} example failed");
    bins.join("examples").join(name)
}

/// A 2x2 loopback cluster of the release binaries in `bins`, two slices of
/// `quantum_ms`: two 2x2 jobs share it in time.
pub fn two_slice_cluster(bins: &Path, quantum_ms: usize) -> gang_local::LocalCluster {
    let opts = gang_local::LocalClusterOptions {
        bin_dir: Some(bins.to_path_buf()),
        master_args: vec![
            "--mpl".into(),
            "2".into(),
            "--quantum-ms".into(),
            quantum_ms.to_string(),
        ],
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..gang_local::LocalClusterOptions::default()
    };
    gang_local::LocalCluster::start((2, 2), opts).expect("cluster")
}

/// Median and p99 (nearest rank, [`gang_core::quantile`]) of a sample (sorted in place),
/// in its unit.
///
/// # Panics
/// On an empty sample: every bench has runs, so none would be a bug in the bench.
/// The sum of a cluster's `/metrics` samples of `name` whose line contains `label`
/// (empty: every label).
pub fn metric_sum(c: &gang_local::LocalCluster, name: &str, label: &str) -> f64 {
    let text = gang_local::http_get(c.metrics_addr(), "/metrics");
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn median_p99(xs: &mut [f64]) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let at = |q| nearest_rank(xs, q).expect("a sample of at least one run");
    (at(0.5), at(0.99))
}

/// A mesh filled to `target` occupancy by jobs of random shapes (1..=8 a side) at random
/// free spots, topped up with single nodes, so the free space is fragmented the way a
/// busy machine's is.
pub fn fragmented(mesh: Shape, target: f64, rng: &mut fastrand::Rng) -> Occupancy {
    let mut occ = Occupancy::new(mesh);
    let goal = (target * mesh.area() as f64) as u64;
    let mut misses = 0;
    while occ.busy() < goal && misses < 200 {
        let s = Shape::new(rng.u32(1..=8), rng.u32(1..=8));
        let sm = Submesh::at(rng.u32(0..mesh.w), rng.u32(0..mesh.h), s);
        if occ.is_free(sm) && occ.busy() + sm.area() <= goal {
            occ.occupy(sm);
            misses = 0;
        } else {
            misses += 1;
        }
    }
    while occ.busy() < goal {
        let sm = Submesh::new(rng.u32(0..mesh.w), rng.u32(0..mesh.h), 1, 1);
        if occ.is_free(sm) {
            occ.occupy(sm);
        }
    }
    occ
}

/// Placement requests on a 32x32 mesh at 80% occupancy: (occupancy, request) pairs with
/// requests of 1..=8 a side, about half of which can be placed.
pub fn placement_cases(n: usize, seed: u64) -> Vec<(Occupancy, Shape)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mesh = Shape::new(32, 32);
    (0..n)
        .map(|_| {
            (
                fragmented(mesh, 0.8, &mut rng),
                Shape::new(rng.u32(1..=8), rng.u32(1..=8)),
            )
        })
        .collect()
}

/// A `/proc/PID/status` field in kB (or a count, as `Threads:`); 0 if unreadable.
pub fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// How many descriptors process `pid` holds open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// (own, reaped children) CPU seconds of a process, from `/proc/PID/stat`.
pub fn proc_cpu(pid: u32) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    if f.len() < 15 {
        return (0.0, 0.0);
    }
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime, stime, cutime, cstime are fields 14-17 (1-based); `rest` starts at field 3.
    ((f[11] + f[12]) / tick, (f[13] + f[14]) / tick)
}

/// Build one of benches/mpi/*.c with `cc` (mpicc.mpich or cc) and extra arguments; the
/// executable's path (in the temporary directory).
pub fn build_c(cc: &str, name: &str, extra: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mpi")
        .join(format!("{name}.c"));
    let dir = std::env::temp_dir().join("gang-bench-mpi");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = std::process::Command::new(cc)
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (sh scripts/setup-test-deps.sh installs it)"));
    assert!(
        out.status.success(),
        "{cc} {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
