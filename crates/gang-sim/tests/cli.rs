//! The `gang-sim` binary, run for real on small traces written here and on the shared
//! KTH trace. Placement and outcome files are checked independently of the simulator.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gang-sim"))
        .args(args)
        .output()
        .expect("gang-sim runs")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "gang-sim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

fn swf_line(id: u64, submit: u64, wait: i64, run: i64, procs: i64, req: i64) -> String {
    format!("{id} {submit} {wait} {run} {procs} -1 -1 {procs} {req} -1 1 1 1 -1 -1 -1 -1 -1\n")
}

/// A 16-processor machine with a mix of jobs, one too large for it.
fn small_trace(dir: &Path) -> PathBuf {
    let mut text = String::from("; Version: 2.2\n; MaxProcs: 16\n");
    let jobs = [
        (1, 0, 0, 100, 16, 200),
        (2, 5, 95, 50, 4, 100),
        (3, 6, 140, 30, 8, 60),
        (4, 7, 150, 10, 2, 20),
        (5, 8, 0, 5, 32, 10), // larger than the machine
        (6, 9, 160, 200, 4, 400),
        (7, 20, 200, 0, 1, 10),
    ];
    for (id, submit, wait, run, procs, req) in jobs {
        text += &swf_line(id, submit, wait, run, procs, req);
    }
    let p = dir.join("small.swf");
    std::fs::write(&p, text).unwrap();
    p
}

fn read_lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// No two intervals of one slice overlap in both time and space.
fn assert_no_overlap(intervals: &[Value]) {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a["slice"] != b["slice"]
                || f(a, "start") >= f(b, "end")
                || f(b, "start") >= f(a, "end")
            {
                continue;
            }
            let apart = f(a, "x") + f(a, "w") <= f(b, "x")
                || f(b, "x") + f(b, "w") <= f(a, "x")
                || f(a, "y") + f(a, "h") <= f(b, "y")
                || f(b, "y") + f(b, "h") <= f(a, "y");
            assert!(apart, "{a} overlaps {b}");
        }
    }
}

#[test]
fn replays_a_small_trace_and_reports_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path());
    let placements = dir.path().join("p.jsonl");
    let outcomes = dir.path().join("o.jsonl");
    let out = sim(&[
        trace.to_str().unwrap(),
        "--mpl",
        "2",
        "--check",
        "--placements",
        placements.to_str().unwrap(),
        "--outcomes",
        outcomes.to_str().unwrap(),
    ]);
    let r = json(&out);
    for key in [
        "jobs",
        "utilization",
        "mean_wait_s",
        "mean_response_s",
        "mean_bounded_slowdown",
        "p95_bounded_slowdown",
        "makespan_s",
        "max_slices_used",
        "recorded",
    ] {
        assert!(r.get(key).is_some(), "report lacks {key}: {r}");
    }
    assert_eq!(r["mesh"], "4x4");
    assert_eq!(r["jobs"], 6);
    assert_eq!(r["recorded"]["jobs"], 6);
    assert_eq!(r["skipped"]["too_large"], 1);
    assert_eq!(r["skipped"]["too_large_examples"][0], 5);
    assert!(r["max_slices_used"].as_u64().unwrap() <= 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 larger than the mesh"), "{stderr}");
    assert!(stderr.contains("recorded"), "{stderr}");

    let intervals = read_lines(&placements);
    assert_no_overlap(&intervals);
    // Every replayed job holds at least one slot, and its slots cover its run: the
    // slot time, divided among the slices in force, adds up to its run time. Here
    // simply: each job's first interval starts at its start.
    let jobs = read_lines(&outcomes);
    assert_eq!(jobs.len(), 6);
    for j in &jobs {
        let mine: Vec<&Value> = intervals.iter().filter(|i| i["job"] == j["job"]).collect();
        assert!(!mine.is_empty(), "job {j} has no placement");
        let first = mine
            .iter()
            .map(|i| i["start"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        let last = mine
            .iter()
            .map(|i| i["end"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert_eq!(first, j["start"].as_f64().unwrap());
        assert_eq!(last, j["end"].as_f64().unwrap());
    }
    // The report's figures, recomputed from the per-job outcomes.
    let n = jobs.len() as f64;
    let g = |j: &Value, k: &str| j[k].as_f64().unwrap();
    let wait: f64 = jobs
        .iter()
        .map(|j| g(j, "start") - g(j, "submit"))
        .sum::<f64>()
        / n;
    let bsld: f64 = jobs
        .iter()
        .map(|j| ((g(j, "end") - g(j, "submit")) / g(j, "runtime").max(10.0)).max(1.0))
        .sum::<f64>()
        / n;
    assert!((wait - r["mean_wait_s"].as_f64().unwrap()).abs() < 1e-6);
    assert!((bsld - r["mean_bounded_slowdown"].as_f64().unwrap()).abs() < 1e-6);
    // The recorded schedule: job 2 waited 95 s, etc. (mean of the given waits).
    let recorded_wait = (0.0 + 95.0 + 140.0 + 150.0 + 160.0 + 200.0) / 6.0;
    assert!((r["recorded"]["mean_wait_s"].as_f64().unwrap() - recorded_wait).abs() < 1e-9);
}

/// Placement lines name the job by its index among the trace's job lines (`job`) and by the
/// trace's own job number (`swf_job`), which need not follow the lines nor be unique.
#[test]
fn placements_carry_the_trace_job_number() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("numbers.swf");
    let numbers = [42, 7, 42, 1000];
    let mut text = String::from("; MaxProcs: 4\n");
    for (i, n) in numbers.iter().enumerate() {
        text += &swf_line(*n, i as u64, 0, 10, 2, 20);
    }
    std::fs::write(&p, text).unwrap();
    let placements = dir.path().join("p.jsonl");
    let r = json(&sim(&[
        p.to_str().unwrap(),
        "-q",
        "--placements",
        placements.to_str().unwrap(),
    ]));
    assert_eq!(r["jobs"], 4);
    let intervals = read_lines(&placements);
    let mut seen = [false; 4];
    for i in &intervals {
        let job = i["job"].as_u64().unwrap() as usize;
        assert_eq!(i["swf_job"], numbers[job], "{i}");
        seen[job] = true;
    }
    assert_eq!(seen, [true; 4], "every job was placed");
}

#[test]
fn malformed_lines_stop_the_replay_with_the_line_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.swf");
    let text = format!(
        "; MaxProcs: 4\n{}1 2 3\n{}",
        swf_line(1, 0, 0, 5, 1, 5),
        swf_line(3, 4, 0, 5, 2, 5)
    );
    std::fs::write(&p, text).unwrap();
    let out = sim(&[p.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 3: expected 18 fields, found 3"),
        "{stderr}"
    );
    let r = json(&sim(&[p.to_str().unwrap(), "--skip-bad", "-q"]));
    assert_eq!(r["skipped"]["malformed"], 1);
    assert_eq!(r["jobs"], 2);
}

#[test]
fn gzip_input_and_bad_options_are_handled() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path());
    let gz = dir.path().join("small.swf.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&std::fs::read(&trace).unwrap()).unwrap();
    enc.finish().unwrap();
    let plain = json(&sim(&[trace.to_str().unwrap(), "-q"]));
    let zipped = json(&sim(&[gz.to_str().unwrap(), "-q"]));
    assert_eq!(
        plain["mean_bounded_slowdown"],
        zipped["mean_bounded_slowdown"]
    );

    let out = sim(&[trace.to_str().unwrap(), "--mesh", "2x2"]);
    assert!(out.status.success());
    assert_eq!(json(&out)["skipped"]["too_large"], 3); // 16, 32 and 8 processors
    for bad in [
        vec!["--mesh", "0x4"],
        vec!["--mesh", "12"],
        vec!["--mpl", "0"],
        vec!["--placer", "worst-fit"],
        vec!["--switch-overhead", "1.5"],
    ] {
        let mut args = vec![trace.to_str().unwrap()];
        args.extend(bad.iter().copied());
        let out = sim(&args);
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(!out.stderr.is_empty());
    }
    let out = sim(&[dir.path().join("missing.swf").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

fn kth() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz");
    assert!(
        p.exists(),
        "the shared traces are expected beside the repository: {}",
        p.display()
    );
    p
}

/// A real trace under every placer with all invariants checked after every step, and
/// the placements checked independently.
#[test]
fn kth_prefix_keeps_every_invariant_under_each_placer() {
    let dir = tempfile::tempdir().unwrap();
    for placer in ["adaptive-scan", "first-fit", "best-fit"] {
        let placements = dir.path().join(format!("{placer}.jsonl"));
        let r = json(&sim(&[
            kth().to_str().unwrap(),
            "--jobs",
            "1500",
            "--mpl",
            "3",
            "--placer",
            placer,
            "--check",
            "-q",
            "--placements",
            placements.to_str().unwrap(),
        ]));
        assert_eq!(
            r["jobs"].as_u64().unwrap() + r["skipped"]["no_runtime"].as_u64().unwrap(),
            1500
        );
        assert_no_overlap(&read_lines(&placements));
    }
}

/// Time sharing must beat space sharing on the recorded workload (the point of it).
#[test]
fn time_sharing_lowers_slowdown_on_kth() {
    let k = kth();
    let bsld = |mpl: &str| {
        json(&sim(&[
            k.to_str().unwrap(),
            "--jobs",
            "5000",
            "--mpl",
            mpl,
            "-q",
        ]))["mean_bounded_slowdown"]
            .as_f64()
            .unwrap()
    };
    let (one, four) = (bsld("1"), bsld("4"));
    assert!(four < one, "MPL 4 bsld {four} vs MPL 1 {one}");
}
