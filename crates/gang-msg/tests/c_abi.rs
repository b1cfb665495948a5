//! The C interface: the C examples are compiled with the system `cc`
//! against `include/gang_msg.h` and the static library cargo built for this
//! test run, then run as ranks under the fake agent. The header is
//! hand-written (no cbindgen): a declaration that drifts from `src/ffi.rs`
//! shows up here as a compile error, a link error or a failed check.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Job, JobSpec};

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
