//! The C interface: the C examples are compiled with the system `cc`
//! against `include/gang_msg.h` and the static library cargo built for this
//! test run, then run as ranks under the fake agent. The header is
//! hand-written (no cbindgen): a declaration that drifts from `src/ffi.rs`
//! shows up here as a compile error, a link error or a failed check.
//!
//! The C examples mirror the Rust ones (ring, all-to-all, halo, ping-pong,
//! deadlock): their JSON lines are compared with the Rust examples' for the
//! same arguments, and C and Rust ranks of one job exchange the same checked
//! messages.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Job, JobSpec, example, expect_ring_deadlock};
use nix::sys::signal::Signal;
use serde_json::Value;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The static library of this build: target/<profile>/deps (what cargo built
/// for this test run), else the uplifted copy in target/<profile>.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libgang_msg.a"),
        deps.parent().unwrap().join("libgang_msg.a"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libgang_msg.a not found next to the test binary: is staticlib in crate-type?")
}

fn compile(source: &str, out: &Path) -> PathBuf {
    let bin = out.join(Path::new(source).file_stem().unwrap());
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("examples/c").join(source))
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .output()
        .expect("run cc");
    assert!(
        st.status.success(),
        "cc {source}:\n{}",
        String::from_utf8_lossy(&st.stderr)
    );
    bin
}

#[test]
fn the_header_compiles_pedantically_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("h.c");
    std::fs::write(&src, "#include \"gang_msg.h\"\nint main(void) { return gm_rank() == GM_ERR_NOT_INIT ? 0 : 1; }\n").unwrap();
    let st = Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(crate_dir().join("include"))
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn every_declared_function_is_exported() {
    let header = std::fs::read_to_string(crate_dir().join("include/gang_msg.h")).unwrap();
    let ffi = std::fs::read_to_string(crate_dir().join("src/ffi.rs")).unwrap();
    let declared: Vec<&str> = header
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("gm_") && header.contains(&format!("{w}(")))
        .collect();
    assert!(declared.len() >= 20, "{declared:?}");
    for f in &declared {
        assert!(
            ffi.contains(&format!("fn {f}(")),
            "{f} is declared in gang_msg.h but not defined in src/ffi.rs"
        );
    }
    for line in ffi.lines().filter(|l| l.contains("extern \"C\" fn gm_")) {
        let name = line.split("fn ").nth(1).unwrap().split('(').next().unwrap();
        assert!(
            declared.contains(&name),
            "{name} is exported but missing from gang_msg.h"
        );
    }
}

#[test]
fn c_ring_and_api_programs_run_as_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let ring = compile("ring.c", dir.path());
    let api = compile("api.c", dir.path());
    Job::start(JobSpec::new(ring.clone(), 4, 1).arg("300")).expect_success(Duration::from_secs(60));
    Job::start(
        JobSpec::new(ring, 2, 2)
            .arg("100")
            .env("GANG_MSG_TRANSPORT", "tcp"),
    )
    .expect_success(Duration::from_secs(60));
    Job::start(JobSpec::new(api.clone(), 3, 1)).expect_success(Duration::from_secs(60));
    Job::start(JobSpec::new(api, 2, 2)).expect_success(Duration::from_secs(60));
}

/// The first JSON line in `path`.
fn json_line(path: &Path) -> Value {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    s.lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line in {}: {s:?}", path.display()))
}

/// Run `spec` to success; the JSON line rank 0 printed.
fn run_json(spec: JobSpec, out: &Path) -> Value {
    let _ = std::fs::remove_file(out);
    Job::start(spec.stdout_to(out)).expect_success(Duration::from_secs(60));
    json_line(out)
}

/// The same keys as the Rust example's line, the example named `<rust>.c`,
/// and equal values but for `differ`.
fn same_line(c: &Value, rust: &Value, differ: &[&str]) {
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(c), keys(rust), "C {c} against Rust {rust}");
    assert_eq!(
        c["example"].as_str().unwrap(),
        format!("{}.c", rust["example"].as_str().unwrap())
    );
    for k in keys(rust) {
        if k != "example" && !differ.contains(&k.as_str()) {
            assert_eq!(c[&k], rust[&k], "{k}: C {c} against Rust {rust}");
        }
    }
}

fn args(spec: JobSpec, a: &[&str]) -> JobSpec {
    a.iter().fold(spec, |s, a| s.arg(*a))
}

#[test]
fn c_alltoall_runs_as_ranks_like_the_rust_example() {
    let dir = tempfile::tempdir().unwrap();
    let c = compile("alltoall.c", dir.path());
    let out = dir.path().join("out");
    // Sizes up to 300 KB, over Unix sockets.
    let a = ["--iters", "60", "--max-size", "300000"];
    let line = run_json(args(JobSpec::new(c.clone(), 4, 1), &a), &out);
    let rust = run_json(args(JobSpec::new(example("alltoall"), 4, 1), &a), &out);
    same_line(&line, &rust, &[]);
    assert_eq!(line["iterations"], 60);
    // TCP forced, 2x2, the default sizes, stopped by a time limit.
    let line = run_json(
        args(JobSpec::new(c, 2, 2), &["--seconds", "0.5"]).env("GANG_MSG_TRANSPORT", "tcp"),
        &out,
    );
    assert!(line["iterations"].as_u64().unwrap() > 0, "{line}");
}

#[test]
fn c_and_rust_ranks_exchange_the_same_checked_messages() {
    // Ranks 0 and 2 run alltoall.c, 1 and 3 the Rust alltoall: each checks
    // the others' sequence numbers, checksums and bodies (util.h against util.rs).
    let dir = tempfile::tempdir().unwrap();
    let c = compile("alltoall.c", dir.path());
    let spec = JobSpec::new("/bin/sh".into(), 2, 2)
        .arg("-c")
        .arg(r#"p="$0"; [ $((GANG_RANK % 2)) = 1 ] && p="$1"; shift; exec "$p" "$@""#)
        .arg(c.to_string_lossy())
        .arg(example("alltoall").to_string_lossy());
    for transport in ["unix", "tcp"] {
        let line = run_json(
            args(spec.clone(), &["--iters", "36", "--max-size", "300000"])
                .env("GANG_MSG_TRANSPORT", transport),
            &dir.path().join("out"),
        );
        assert_eq!(line["iterations"], 36, "{line}");
    }
}

#[test]
fn c_halo_checks_itself_and_matches_the_rust_example() {
    let dir = tempfile::tempdir().unwrap();
    let c = compile("halo.c", dir.path());
    let out = dir.path().join("out");
    for (w, h, transport, a) in [
        (2, 2, "unix", ["--iters", "50", "--block", "8"]),
        (3, 2, "tcp", ["--iters", "40", "--block", "5"]),
        (1, 1, "unix", ["--iters", "30", "--block", "6"]),
    ] {
        // Every rank checks its tile bit for bit against a serial
        // recomputation and exits 1 on a mismatch (run_json wants 0).
        let line = run_json(
            args(JobSpec::new(c.clone(), w, h), &a).env("GANG_MSG_TRANSPORT", transport),
            &out,
        );
        let rust = run_json(
            args(JobSpec::new(example("halo"), w, h), &a).env("GANG_MSG_TRANSPORT", transport),
            &out,
        );
        // The same algorithm: the same global sum to the bit.
        same_line(&line, &rust, &["sum"]);
        assert_eq!(
            line["sum"].as_f64().unwrap().to_bits(),
            rust["sum"].as_f64().unwrap().to_bits(),
            "C {line} against Rust {rust}"
        );
    }
}

#[test]
fn c_pingpong_prints_the_rust_examples_line() {
    let dir = tempfile::tempdir().unwrap();
    let c = compile("pingpong.c", dir.path());
    let out = dir.path().join("out");
    let a = ["--iters", "500", "--warmup", "50", "--spin-us", "20"];
    let line = run_json(args(JobSpec::new(c.clone(), 2, 1), &a), &out);
    let rust = run_json(args(JobSpec::new(example("pingpong"), 2, 1), &a), &out);
    same_line(&line, &rust, &["one_way_median_us", "one_way_p99_us"]);
    // Checked 1000-byte messages over TCP, two idle ranks, the spin from the environment.
    let line = run_json(
        args(JobSpec::new(c, 2, 2), &["--iters", "300", "--size", "1000"])
            .env("GANG_MSG_TRANSPORT", "tcp")
            .env("GANG_MSG_SPIN_US", "7"),
        &out,
    );
    assert_eq!(
        (line["size"].as_u64(), line["spin_us"].as_u64()),
        (Some(1000), Some(7))
    );
    for l in [&line, &rust] {
        let (m, p) = (
            l["one_way_median_us"].as_f64().unwrap(),
            l["one_way_p99_us"].as_f64().unwrap(),
        );
        assert!(m > 0.0 && m <= p, "{l}");
    }
}

#[test]
fn c_deadlock_ends_blocked_with_nothing_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let c = compile("deadlock.c", dir.path());
    for (w, h, transport) in [(4, 1, "unix"), (2, 2, "tcp")] {
        let err = dir.path().join(format!("stderr-{transport}"));
        let mut job = Job::start(
            JobSpec::new(c.clone(), w, h)
                .env("GANG_MSG_TRANSPORT", transport)
                .stderr_to(&err),
        );
        let n = job.size();
        // What tests/agent_view.rs checks of the Rust deadlock example.
        expect_ring_deadlock(&mut job);
        assert!(!job.poll_exit() && job.statuses.iter().all(|s| s.is_none()));
        let log = std::fs::read_to_string(&err).unwrap();
        for r in 0..n {
            let want = format!(
                "rank {r}: receiving from {} before sending: deadlock",
                (r + 1) % n
            );
            assert!(log.contains(&want), "{want:?} not in {log:?}");
        }
        // Blocked for good: only a kill ends it.
        for r in 0..n {
            job.signal(r, Signal::SIGKILL);
        }
        for (r, st) in job.wait(Duration::from_secs(10)).iter().enumerate() {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(st.signal(), Some(9), "rank {r}: {st}");
        }
    }
}
