//! The README's first command, `gangctl start --mesh 4x4 -- sh demo/demo.sh`, run as a
//! user would (with the debug binaries): the demo must finish, and show what the README
//! says it shows, so neither can rot.

use std::path::Path;
use std::process::{Command, Stdio};

const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

#[test]
fn the_demo_shows_what_the_readme_says() {
    let bins = Path::new(GANGCTL).parent().unwrap();
    if !bins.join("gang-master").is_file() || !bins.join("gang-agent").is_file() {
        eprintln!(
            "skipped: gang-master / gang-agent are not built in {}",
            bins.display()
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let runtime = tempfile::tempdir().unwrap();
    let o = Command::new(GANGCTL)
        .args(["start", "--mesh", "4x4", "--", "sh", "demo/demo.sh"])
        .current_dir(&root)
        .env_remove("GANG_MASTER")
        .env_remove("GANG_OUTPUT")
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("a queued job starting when another is cancelled"));
    for shown in [
        // 16 ranks printing where they run.
        "15: rank 15 of 16 on node",
        // An exit code coming back, stdin reaching rank 0.
        "prun exited with 7",
        "0: hello",
        // Shapes sharing the mesh, drawn.
        "slice 0 (3 jobs)",
        // A queued job, and why; it starts when another is cancelled.
        "(resources)",
        "(priority)",
        "the queued job",
        "(waiting for node (0,3): drained)",
        // Time limits, rounding, clear errors.
        "timed out: time limit of 1 s reached",
        "prun exited with 124",
        "so 5 would run on 6 (3x2); drop --exact to accept",
        "job asks 5x5 but the mesh is 4x4",
        "expected a duration: MM, MM:SS",
    ] {
        assert!(
            out.contains(shown) || err.contains(shown),
            "the demo does not show {shown:?}:\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
    // The queued job runs once the job ahead of it is cancelled.
    let after = out.split("the queued job").nth(1).unwrap();
    let queued_line = after
        .lines()
        .find(|l| l.contains(" queued") && l.contains("4x4@"))
        .unwrap_or_else(|| panic!("the queued job never ran:\n{after}"));
    assert!(queued_line.contains(" running "), "{queued_line}");
}
