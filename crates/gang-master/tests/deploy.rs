//! deploy/: the systemd units pass `systemd-analyze verify`, the sysusers file makes the
//! master's user, and every example config has a test that parses it with its program's
//! own loader.
//!
//! What the verify test asserts, for copies of deploy/gang-master.service and
//! deploy/gang-agent.service whose `ExecStart=` binary is this build's (verify insists the
//! binary exists and is executable, and /usr/local/bin/gang-* are not installed here):
//! - `systemd-analyze verify` exits 0;
//! - none of its output names either unit. systemd reports an unknown key, a bad value,
//!   a missing binary or a missing hard dependency as `FILE:LINE: ...` or `UNIT: ...`
//!   and most of these only as warnings with exit 0, hence this second check.
//!
//! Other output is the environment speaking (a container without a booted systemd,
//! other units on the host) and is printed, not judged. `--recursive-errors=no` keeps
//! errors of other units out; `--man=no` skips looking up man pages, which a minimal
//! system lacks; `--generators=no` runs none of the host's generators.
//! A control test checks that a broken unit is caught on this host's systemd.

use std::path::{Path, PathBuf};
use std::process::Command;

const SETUP: &str =
    "run `sh scripts/setup-test-deps.sh` as root (it installs the Debian package systemd)";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn agent_bin() -> PathBuf {
    // Cargo builds a binary for its own package's tests only; `cargo test --workspace`
    // builds gang-agent's beside this one.
    let p = Path::new(env!("CARGO_BIN_EXE_gang-master")).with_file_name("gang-agent");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build -p gang-agent` (cargo test --workspace does)",
        p.display()
    );
    p
}

/// The installed path each unit runs, and this build's binary to verify it with.
fn units() -> Vec<(&'static str, &'static str, PathBuf)> {
    vec![
        (
            "gang-master.service",
            "/usr/local/bin/gang-master",
            PathBuf::from(env!("CARGO_BIN_EXE_gang-master")),
        ),
        (
            "gang-agent.service",
            "/usr/local/bin/gang-agent",
            agent_bin(),
        ),
    ]
}

/// The unit's text with `ExecStart=`'s binary replaced by `built`.
fn with_binary(text: &str, installed: &str, built: &Path) -> String {
    let starts: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("ExecStart="))
        .collect();
    assert_eq!(starts.len(), 1, "one ExecStart= line: {starts:?}");
    let want = format!("ExecStart={installed} ");
    assert!(
        starts[0].trim_start().starts_with(&want),
        "ExecStart= runs {installed}, where deploy/README.md installs it: {:?}",
        starts[0]
    );
    text.replace(&want, &format!("ExecStart={} ", built.display()))
}

/// `systemd-analyze verify` on the named unit files in `dir`: Ok, or what is wrong.
fn verify(dir: &Path, names: &[&str]) -> Result<(), String> {
    let out = match Command::new("systemd-analyze")
        .args([
            "verify",
            "--man=no",
            "--generators=no",
            "--recursive-errors=no",
        ])
        .args(names.iter().map(|n| dir.join(n)))
        .env("SYSTEMD_LOG_COLOR", "0")
        .env("SYSTEMD_PAGER", "cat")
        .env_remove("SYSTEMD_LOG_LEVEL")
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("systemd-analyze is not installed: {SETUP}")
        }
        Err(e) => panic!("cannot run systemd-analyze: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let about_ours: Vec<&str> = text
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n)))
        .collect();
    let noise: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !about_ours.contains(l))
        .collect();
    if !noise.is_empty() {
        eprintln!("systemd-analyze, about the environment (not judged):");
        for l in &noise {
            eprintln!("  {l}");
        }
    }
    if out.status.success() && about_ours.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "systemd-analyze verify: {}\n{}",
            out.status,
            if about_ours.is_empty() {
                text.clone()
            } else {
                about_ours.join("\n")
            }
        ))
    }
}

#[test]
fn the_units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let mut names = vec![];
    for (name, installed, built) in units() {
        let text = std::fs::read_to_string(deploy().join(name)).unwrap();
        std::fs::write(dir.path().join(name), with_binary(&text, installed, &built)).unwrap();
        names.push(name);
    }
    if let Err(e) = verify(dir.path(), &names) {
        panic!("{e}");
    }
}

/// The master runs no user code and stays sandboxed: `systemd-analyze security` rates its
/// unit 1.2 of 10 ("OK") on systemd 252; deleting a hardening line fails this.
#[test]
fn the_master_unit_stays_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let (name, installed, built) = units().remove(0);
    let text = std::fs::read_to_string(deploy().join(name)).unwrap();
    std::fs::write(dir.path().join(name), with_binary(&text, installed, &built)).unwrap();
    let out = match Command::new("systemd-analyze")
        // Exposure in tenths: at most 1.2.
        .args(["security", "--offline=yes", "--threshold=12", "--no-pager"])
        .arg(dir.path().join(name))
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("systemd-analyze is not installed: {SETUP}")
        }
        Err(e) => panic!("cannot run systemd-analyze: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let overall = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or("no overall exposure level");
    assert!(
        out.status.success(),
        "{overall}; exposed:\n{}\n{}",
        text.lines()
            .filter(|l| l.starts_with('✗'))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn verify_catches_a_broken_unit_on_this_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let (name, installed, built) = units().remove(0);
    let text = std::fs::read_to_string(deploy().join(name)).unwrap();
    let good = with_binary(&text, installed, &built);
    let cases = [
        // Warnings only (exit 0) on systemd 252: caught by reading the output.
        (
            "a misspelt key",
            good.replace("WatchdogSec=", "WatchdogSecs="),
            "WatchdogSecs",
        ),
        (
            "a bad value",
            good.replace("Type=notify", "Type=notfy"),
            "notfy",
        ),
        // An error (exit 1).
        (
            "a missing binary",
            good.replace(&built.display().to_string(), "/nonexistent/gang-master"),
            "/nonexistent/gang-master",
        ),
    ];
    for (what, unit, named) in cases {
        std::fs::write(dir.path().join(name), unit).unwrap();
        match verify(dir.path(), &[name]) {
            Ok(()) => panic!("{what} passed verify"),
            Err(e) => assert!(e.contains(named), "{what}: {e}"),
        }
    }
}

/// The unit's `User=gang` exists once deploy/gang.sysusers is applied.
#[test]
fn the_sysusers_file_makes_the_gang_user() {
    let root = tempfile::tempdir().unwrap();
    let out = match Command::new("systemd-sysusers")
        .arg("--dry-run")
        .arg(format!("--root={}", root.path().display()))
        .arg(deploy().join("gang.sysusers").canonicalize().unwrap())
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("systemd-sysusers is not installed: {SETUP}")
        }
        Err(e) => panic!("cannot run systemd-sysusers: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Creating user 'gang' (gang scheduler master)"),
        "{text}"
    );
    assert!(!text.contains("gang.sysusers:"), "{text}");
}

/// Each example config, and the test that parses it with its program's own loader. A new
/// example in deploy/ needs a row here, and a test.
const EXAMPLES: [(&str, &str); 3] = [
    (
        "master.toml",
        "crates/gang-master/tests/config.rs: every_key_of_the_example_config_is_accepted",
    ),
    (
        "agent.toml",
        "crates/gang-agent/tests/config.rs: the_example_config_resolves",
    ),
    (
        "client.toml",
        "crates/gang-e2e/tests/deploy_examples.rs: the_example_client_config_parses",
    ),
];

#[test]
fn every_example_config_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(deploy())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    found.sort();
    let mut tested: Vec<String> = EXAMPLES.iter().map(|(n, _)| n.to_string()).collect();
    tested.sort();
    assert_eq!(found, tested, "deploy/*.toml and the tests that parse them");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (_, test) in EXAMPLES {
        let (file, name) = test.split_once(": ").unwrap();
        let src = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(src.contains(&format!("fn {name}()")), "{test} is gone");
    }
}
