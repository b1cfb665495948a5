//! The API guide's examples, run as written: every ```` ```python api-test ```` block of
//! docs/api.md, in order, as one program of a Python grpcio client generated from `proto/`,
//! against a real 2x2 cluster on its Unix socket (and its TLS port with a token, for the
//! remote example). The venv (grpcio, grpcio-tools, health and reflection from PyPI,
//! pinned in scripts/python-api-requirements.txt) is made once and cached by
//! scripts/setup-python-api-test.sh; the stubs are generated afresh on every run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gang_e2e::*;

/// The blocks of `markdown` whose fence says `python api-test`.
fn api_test_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```python api-test" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(
        current.is_none(),
        "docs/api.md: a python api-test block is not closed"
    );
    blocks
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_api_guide_examples_run_in_python() {
    let root = repo_root();
    let guide = std::fs::read_to_string(root.join("docs/api.md")).unwrap();
    let blocks = api_test_blocks(&guide);
    assert!(
        blocks.len() >= 8,
        "docs/api.md has {} api-test blocks",
        blocks.len()
    );
    let program = blocks.join("\n");

    let work = tempfile::tempdir().unwrap();
    let stubs = work.path().join("stubs");
    let setup = Command::new("sh")
        .arg(root.join("scripts/setup-python-api-test.sh"))
        .arg(&stubs)
        .output()
        .expect("run scripts/setup-python-api-test.sh");
    assert!(
        setup.status.success(),
        "scripts/setup-python-api-test.sh failed (python3 with venv, and PyPI the first time):\n{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let python = String::from_utf8_lossy(&setup.stdout)
        .lines()
        .last()
        .expect("the script prints the venv's python")
        .to_owned();
    let script = work.path().join("api_guide.py");
    std::fs::write(&script, &program).unwrap();

    let c = cluster(2, 2, &[]);
    // The remote example reads ~/.config/gang/token: a HOME of its own, with a token
    // from `gangctl token --save` on the master's socket, as the API guide says.
    let home = work.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = Command::new(bin_dir().join("gangctl"))
        .args(["--master", c.master_addr(), "token", "--save"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tls = c.grpc_socket().expect("the master's TLS port");

    let mut child = Command::new(&python)
        .arg(&script)
        .env("PYTHONPATH", &stubs)
        .env("GANG_MASTER", c.master_addr())
        .env("GANG_CA", c.ca())
        .env("GANG_TLS_MASTER", tls.to_string())
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Every call in the examples has its own timeout; this bounds the whole program.
    let status = wait_for(
        Duration::from_secs(600),
        "the API guide's examples to finish",
        || child.try_wait().unwrap(),
    );
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}");
    assert!(
        status.success(),
        "the API guide's python api-test blocks failed:\n{stderr}\n--- stdout:\n{stdout}\n--- program:\n{program}"
    );
    // What the examples print, as the API guide's comments say.
    assert!(stdout.contains("True JOB_STATE_"), "{stdout}");
    assert!(stdout.contains("already cancelled"), "{stdout}");
    assert!(stdout.contains("2 2"), "{stdout}");
    c.shutdown().unwrap();
}

#[test]
fn api_test_blocks_are_found_in_order() {
    let md = "x\n```python api-test\na = 1\n```\n```python\nnot = 'this'\n```\n```python api-test\nb = a\n```\n";
    assert_eq!(api_test_blocks(md), ["a = 1\n", "b = a\n"]);
}
