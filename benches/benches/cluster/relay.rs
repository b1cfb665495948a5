//! Output relay throughput (issue "Nothing lost, nothing flaky"): `prun` relaying 1 GiB
//! of a job's stdout, from one rank and from 16 ranks, against `cat` of the same bytes.
//!
//! A file of incompressible (random) bytes is made in a fresh temporary directory under
//! `RELAY_DIR` (default: the system's temp dir, `/tmp`) and removed at the end. Then, one
//! cluster at a time (release binaries, the master's `[limits] max_output_bytes` raised by
//! a config file so that 1 GiB and its record headers fit):
//!
//! - 1x1: `prun -n 1x1 -- cat FILE` against `cat FILE`;
//! - 4x4: `prun -n 4x4 -- sh -c 'exec dd if=FILE bs=1M skip=$((GANG_RANK*S)) count=S'`,
//!   each rank writing its own slice of S = 1/16 of the file (1 GiB in all), against
//!   `cat FILE`.
//!
//! Runs alternate (prun, cat, prun, cat, ...) so the machine's noise hits both alike; after
//! each prun run the master's log of the job (1 GiB) is emptied, so the disk does not fill. Both
//! commands' stdout is a pipe that this bench reads and discards, counting the bytes: a
//! run that relays anything but exactly the file's size, or whose prun fails, fails the
//! bench. Each run is timed from spawning the command to its exit (for prun: submission,
//! launch, relay, the job's end). CPU per run: the command's own (its rusage), the
//! master's and the agents' (`/proc/PID/stat`), and the ranks' (the agents' reaped
//! children).
//!
//! Prints a line per case (MB/s = 10^6 bytes/s: median, the rate of the p99 run time, min
//! and max; with few runs p99 is the slowest run) and one JSON line `{"bench":"relay",...}`.
//!
//! Needs the release binaries, built beforehand (it does not build them):
//! `cargo build --release -p gang-master -p gang-agent -p gang-cli`, then
//! `cargo bench -p gang-benches --bench relay`.
//! Env: RELAY_RUNS (runs per command and case, default 5), RELAY_MIB (file size in MiB,
//! default 1024, a multiple of 16), RELAY_CASES (`1x1,4x4` by default), RELAY_DIR.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use gang_benches::{env_or, median_p99, prebuilt_release_bins, proc_cpu};
use gang_local::{LocalCluster, LocalClusterOptions};

const MIB: u64 = 1 << 20;

/// CPU seconds of one run, by process.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    /// The timed command (prun or cat) itself.
    command: f64,
    master: f64,
    /// All agents together.
    agents: f64,
    /// The job's ranks (reaped by their agents).
    ranks: f64,
}

/// One timed run.
struct Run {
    secs: f64,
    cpu: Cpu,
}

/// CPU seconds of this process's reaped children (each timed command is one when reaped).
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct we hand it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// The daemons of a cluster, for their CPU.
struct Daemons {
    master: u32,
    agents: Vec<u32>,
}

impl Daemons {
    fn of(c: &mut LocalCluster) -> Daemons {
        let (w, h) = c.mesh();
        let master = c.master_pid().expect("the master runs");
        let agents = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| c.agent_pid(x, y).expect("every agent runs"))
            .collect();
        Daemons { master, agents }
    }

    /// (master, agents, ranks) CPU seconds so far.
    fn sample(&self) -> (f64, f64, f64) {
        let (m, _) = proc_cpu(self.master);
        let (a, r) = self
            .agents
            .iter()
            .map(|&p| proc_cpu(p))
            .fold((0.0, 0.0), |(a, r), (x, y)| (a + x, r + y));
        (m, a, r)
    }
}

/// Run `cmd`, reading and discarding its stdout; fails loudly unless it exits 0 having
/// written exactly `expect` bytes.
fn timed(mut cmd: Command, expect: u64, daemons: &Daemons, what: &str) -> Run {
    let before = (children_cpu(), daemons.sample());
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let mut err = child.stderr.take().expect("piped");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; MIB as usize];
    let mut got = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("{what}: reading its stdout: {e}"),
        }
    }
    let status = child.wait().expect("wait");
    let secs = start.elapsed().as_secs_f64();
    let after = (children_cpu(), daemons.sample());
    let stderr = stderr.join().expect("stderr reader");
    assert!(
        status.success(),
        "{what}: exited with {status} after relaying {got} of {expect} bytes: {stderr}"
    );
    assert_eq!(
        got, expect,
        "{what}: relayed {got} bytes, not the {expect} bytes written (stderr: {stderr:?})"
    );
    Run {
        secs,
        cpu: Cpu {
            command: after.0 - before.0,
            master: after.1.0 - before.1.0,
            agents: after.1.1 - before.1.1,
            ranks: after.1.2 - before.1.2,
        },
    }
}

/// `mib` MiB of random bytes (incompressible) at `path`.
fn make_file(path: &Path, mib: u64) {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create the file"));
    let mut buf = vec![0u8; MIB as usize];
    for _ in 0..mib {
        rng.fill(&mut buf);
        f.write_all(&buf).expect("write the file");
    }
    f.into_inner()
        .expect("flush")
        .sync_all()
        .expect("sync the file");
}

/// A cluster of `mesh` whose master keeps `max_output` bytes of a job's output.
fn cluster(bins: &Path, dir: &Path, mesh: (u32, u32), max_output: u64) -> LocalCluster {
    let config = dir.join("master.toml");
    std::fs::write(
        &config,
        format!("[limits]\nmax_output_bytes = {max_output}\n"),
    )
    .expect("write the master's config");
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.to_path_buf()),
        master_args: vec!["--config".into(), config.display().to_string()],
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    LocalCluster::start(mesh, opts).expect("cluster")
}

/// Empty the master's job logs (`DIR/state.db.output/JOB.out`, a GiB each; the jobs have
/// ended and nobody reads them again), so the runs do not fill the disk. Truncated rather
/// than removed: the master may still hold them open. Returns how many were emptied.
fn drop_logs(c: &LocalCluster) -> usize {
    let dir = c.dir().join("state.db.output");
    let mut emptied = 0;
    for e in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the master's output logs in {}: {e}", dir.display()))
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "out")
            && let Ok(f) = std::fs::OpenOptions::new().write(true).open(e.path())
            && f.set_len(0).is_ok()
        {
            emptied += 1;
        }
    }
    emptied
}

fn summary(runs: &[Run], bytes: u64) -> serde_json::Value {
    let mut secs: Vec<f64> = runs.iter().map(|r| r.secs).collect();
    let (median, p99) = median_p99(&mut secs);
    let rate = |s: f64| bytes as f64 / 1e6 / s;
    let med_cpu = |f: fn(&Cpu) -> f64| {
        let mut xs: Vec<f64> = runs.iter().map(|r| f(&r.cpu)).collect();
        median_p99(&mut xs).0
    };
    serde_json::json!({
        "runs": runs.len(),
        "mb_per_s": {
            "median": rate(median),
            "p99": rate(p99),
            "min": rate(secs[secs.len() - 1]),
            "max": rate(secs[0]),
        },
        "secs": {"median": median, "p99": p99, "min": secs[0], "max": secs[secs.len() - 1]},
        "cpu_s_median": {
            "command": med_cpu(|c| c.command),
            "master": med_cpu(|c| c.master),
            "agents": med_cpu(|c| c.agents),
            "ranks": med_cpu(|c| c.ranks),
        },
    })
}

fn line(name: &str, s: &serde_json::Value) {
    let r = &s["mb_per_s"];
    let c = &s["cpu_s_median"];
    println!(
        "{name:<34} {:>7.1} MB/s median, p99 {:>7.1}, min {:>7.1}, max {:>7.1} ({} runs, {:.2} s median); CPU s: command {:.2}, master {:.2}, agents {:.2}, ranks {:.2}",
        r["median"].as_f64().unwrap_or(0.0),
        r["p99"].as_f64().unwrap_or(0.0),
        r["min"].as_f64().unwrap_or(0.0),
        r["max"].as_f64().unwrap_or(0.0),
        s["runs"],
        s["secs"]["median"].as_f64().unwrap_or(0.0),
        c["command"].as_f64().unwrap_or(0.0),
        c["master"].as_f64().unwrap_or(0.0),
        c["agents"].as_f64().unwrap_or(0.0),
        c["ranks"].as_f64().unwrap_or(0.0),
    );
}

/// The mesh of `case` (1x1: one rank cats the file; 4x4: 16 ranks each `dd` a sixteenth)
/// and the `prun` arguments that run it.
fn case_args(case: &str, mib: u64, file_arg: &str) -> ((u32, u32), Vec<String>) {
    match case {
        "1x1" => (
            (1, 1),
            vec![
                "-n".into(),
                "1x1".into(),
                "--".into(),
                "cat".into(),
                file_arg.into(),
            ],
        ),
        "4x4" => {
            let slice = mib / 16;
            let script = format!(
                "exec dd if=\"$1\" bs=1M skip=$((GANG_RANK*{slice})) count={slice} status=none"
            );
            (
                (4, 4),
                vec![
                    "-n".into(),
                    "4x4".into(),
                    "--".into(),
                    "sh".into(),
                    "-c".into(),
                    script,
                    "sh".into(),
                    file_arg.into(),
                ],
            )
        }
        other => panic!("RELAY_CASES: unknown case {other:?} (1x1 or 4x4)"),
    }
}

/// Prints the table and the JSON line.
fn report(
    mib: u64,
    bytes: u64,
    base: &Path,
    summaries: &[(String, serde_json::Value)],
    results: serde_json::Map<String, serde_json::Value>,
) {
    println!(
        "relay of {mib} MiB ({bytes} bytes) through prun vs cat; stdout read and discarded by the bench"
    );
    for (name, s) in summaries {
        line(name, s);
    }
    let out = serde_json::json!({
        "bench": "relay",
        "bytes": bytes,
        "unit": "MB/s = 1e6 bytes/s; p99 is the rate of the p99 (nearest-rank) run time",
        "file_dir": base.display().to_string(),
        "cases": results,
    });
    println!("{out}");
}

fn main() {
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "prun"]);
    let runs: usize = env_or("RELAY_RUNS", 5);
    let mib: u64 = env_or("RELAY_MIB", 1024);
    assert!(
        mib > 0 && mib.is_multiple_of(16),
        "RELAY_MIB must be a positive multiple of 16 (16 ranks take a slice each)"
    );
    let cases: String = env_or("RELAY_CASES", "1x1,4x4".to_string());
    let base = std::env::var_os("RELAY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let bytes = mib * MIB;
    let tmp = tempfile::Builder::new()
        .prefix("gang-relay-bench-")
        .tempdir_in(&base)
        .expect("a temporary directory");
    let file = tmp.path().join("data.bin");
    let t = Instant::now();
    make_file(&file, mib);
    eprintln!(
        "relay: {} made in {:.1} s ({mib} MiB of random bytes)",
        file.display(),
        t.elapsed().as_secs_f64()
    );
    let file_arg = file.display().to_string();
    // Records of up to 1 MiB with 9-byte headers: 64 MiB over the data is room to spare.
    let max_output = bytes + 64 * MIB;

    let mut results = serde_json::Map::new();
    let mut summaries = vec![];
    for case in cases.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (mesh, prun_args) = case_args(case, mib, &file_arg);
        let cdir = tmp.path().join(format!("config-{case}"));
        std::fs::create_dir_all(&cdir).expect("config dir");
        let mut c = cluster(&bins, &cdir, mesh, max_output);
        let daemons = Daemons::of(&mut c);
        let prun = |args: &[String]| {
            let mut cmd = Command::new(bins.join("prun"));
            cmd.args(args).env("GANG_MASTER", c.master_addr());
            cmd
        };
        let cat = || {
            let mut cmd = Command::new("cat");
            cmd.arg(&file);
            cmd
        };
        // Warm-up, not counted: the file in the page cache, the cluster's connections up.
        timed(cat(), bytes, &daemons, "cat (warm-up)");
        let shape = if mesh == (1, 1) { "1x1" } else { "4x4" };
        let warm: Vec<String> = ["-n", shape, "--", "true"].map(String::from).to_vec();
        timed(prun(&warm), 0, &daemons, "prun true (warm-up)");
        let (mut p, mut k) = (vec![], vec![]);
        for i in 0..runs {
            let what = format!("prun -n {case} run {}", i + 1);
            p.push(timed(prun(&prun_args), bytes, &daemons, &what));
            assert!(drop_logs(&c) > 0, "no job log found to empty");
            k.push(timed(cat(), bytes, &daemons, &format!("cat run {}", i + 1)));
            eprintln!(
                "relay {case}: run {}/{runs}: prun {:.2} s, cat {:.3} s",
                i + 1,
                p[i].secs,
                k[i].secs
            );
        }
        c.shutdown().expect("cluster shutdown");
        let (sp, sk) = (summary(&p, bytes), summary(&k, bytes));
        let ratio = sk["secs"]["median"].as_f64().unwrap_or(0.0)
            / sp["secs"]["median"].as_f64().unwrap_or(1.0);
        let ranks = mesh.0 * mesh.1;
        summaries.push((format!("prun -n {case} ({ranks} rank(s))"), sp.clone()));
        summaries.push((format!("cat (beside the {case} runs)"), sk.clone()));
        results.insert(
            case.to_string(),
            serde_json::json!({
                "ranks": ranks,
                "prun": sp,
                "cat": sk,
                "prun_rate_over_cat_rate": ratio,
            }),
        );
    }
    drop(tmp); // the file and the clusters' configs
    report(mib, bytes, &base, &summaries, results);
}
