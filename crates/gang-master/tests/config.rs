//! The master's configuration edge: the shipped example is accepted whole, bad input is
//! refused with a message naming the problem.

use std::path::Path;
use std::process::Command;

use gang_master::daemon_config::file::FileConfig;

mod common;
use common::local_flags;

fn master(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gang-master"))
        .args(args)
        .output()
        .unwrap()
}

/// deploy/master.toml sets every key the master accepts, and the master starts with it:
/// the file through the master's own loader, then every value through the same
/// resolution as in production (only the addresses, files and the database are
/// overridden by flags, to run here).
#[test]
fn every_key_of_the_example_config_is_accepted() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/master.toml");
    let c = FileConfig::load(&p).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("None"),
        "deploy/master.toml leaves a key out; document every key there: {shown}"
    );
    assert_eq!(c.mesh.as_deref(), Some("4x4"));
    assert_eq!(c.mpl, Some(4));
    assert_eq!(c.quantum_ms, Some(50));
    assert_eq!(c.gang_mode.as_deref(), Some("stop"));
    assert_eq!(c.on_deadlock.as_deref(), Some("report"));

    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gang-master"))
        .arg("--config")
        .arg(&p)
        .args(local_flags(dir.path()))
        .arg("--state")
        .arg(dir.path().join("s.db"))
        .arg("--ready-file")
        .arg(&ready)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ready.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the master refused deploy/master.toml ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the master never got ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn malformed_config_names_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "mesh = \"4x4\"\nmpl = \"three\"\n").unwrap();
    let out = master(&["--config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("mpl"), "{err}");

    std::fs::write(&p, "mesh = \"4x4\"\nmeshh = \"4x4\"\n").unwrap();
    let err =
        String::from_utf8_lossy(&master(&["--config", p.to_str().unwrap()]).stderr).to_string();
    assert!(
        err.contains("unknown field") && err.contains("meshh"),
        "{err}"
    );
}

#[test]
fn bad_flags_are_refused() {
    let out = master(&["--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the mesh is required"));
    for mesh in ["0x4", "8", "abc", "300x2"] {
        let out = master(&["--mesh", mesh]);
        assert!(!out.status.success(), "mesh {mesh} accepted");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = master(&[
        "--mesh",
        "2x2",
        "--mpl",
        "0",
        "--state",
        dir.path().join("s.db").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mpl must be at least 1"));
}

#[test]
fn etcd_tls_files_are_checked_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not read before it is needed").unwrap();
    let ca = ca.to_str().unwrap();
    let etcd = ["--mesh", "2x2", "--state", "etcd://127.0.0.1:1/gang/test"];
    for (extra, said) in [
        (
            vec!["--etcd-cert", ca, "--etcd-key", ca],
            "etcd_cert and etcd_key need etcd_ca",
        ),
        (
            vec!["--etcd-ca", ca, "--etcd-cert", ca],
            "etcd_cert and etcd_key go together",
        ),
        (
            vec!["--etcd-ca", "/nonexistent/ca.pem"],
            "cannot read the CA certificate /nonexistent/ca.pem",
        ),
        // No client certificate: refused, unless the network is said to be the masters'.
        (
            vec![],
            "is reached without a client certificate: anyone who can write it can queue jobs there to run as any user",
        ),
    ] {
        let args: Vec<&str> = etcd.iter().copied().chain(extra).collect();
        let out = master(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(said),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn state_database_of_another_mesh_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    {
        let store = gang_master::persistence::sqlite::Store::open(&db).unwrap();
        store.set_mesh("2x2").unwrap();
    }
    let mut args = vec!["--mesh", "4x4", "--state", db.to_str().unwrap()];
    let local = local_flags(dir.path());
    args.extend(local.iter().map(String::as_str));
    let out = master(&args);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("made for a 2x2 mesh, not 4x4"), "{err}");
}

#[test]
fn a_master_without_its_certificates_says_how_to_make_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let out = master(&[
        "--mesh",
        "2x2",
        "--state",
        db.to_str().unwrap(),
        "--tls-ca",
        "/nonexistent/ca.pem",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/ca.pem") && err.contains("gangctl certs init"),
        "{err}"
    );
}

/// The layers: the environment (`GANG_MASTER_*`) over the file, flags over both; a key's
/// old name (`allocator`, now `placer`) still read.
#[test]
fn the_environment_and_flags_layer_over_the_file_and_old_names_are_read() {
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gang-master"))
            .envs(env.iter().copied())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = run(&[("GANG_MASTER_MPL", "0")], &["--mesh", "2x2"]);
    assert!(err.contains("mpl must be at least 1"), "{err}");
    // The flag wins: the next check fails instead.
    let err = run(
        &[("GANG_MASTER_MPL", "0")],
        &["--mesh", "2x2", "--mpl", "2", "--quantum-ms", "0"],
    );
    assert!(err.contains("quantum_ms must be between"), "{err}");
    let err = run(&[("GANG_MASTER_MPL", "two")], &["--mesh", "2x2"]);
    assert!(err.contains("GANG_MASTER_") && err.contains("MPL"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("old.toml");
    std::fs::write(
        &p,
        "mesh = \"2x2\"\nallocator = \"first-fit\"\nfences = \"nope\"\n",
    )
    .unwrap();
    let err = run(&[], &["--config", p.to_str().unwrap()]);
    assert!(err.contains("fences = \"nope\""), "{err}");
    let err = run(
        &[],
        &[
            "--mesh",
            "2x2",
            "--allocator",
            "first-fit",
            "--quantum-ms",
            "0",
        ],
    );
    assert!(err.contains("quantum_ms must be between"), "{err}");
    // The old name and --portal's in the environment too (figment gives the map the key
    // as the environment spells it: ALLOCATOR). Each reaches the next check, not "unknown
    // field".
    for env in [
        ("GANG_MASTER_ALLOCATOR", "first-fit"),
        ("GANG_MASTER_PORTAL", "true"),
    ] {
        let err = run(&[env], &["--mesh", "2x2", "--quantum-ms", "0"]);
        assert!(err.contains("quantum_ms must be between"), "{env:?}: {err}");
    }
    let err = run(
        &[("GANG_MASTER_ALLOCATOR", "worst-fit")],
        &["--mesh", "2x2"],
    );
    assert!(err.contains("worst-fit"), "the old name is read: {err}");
}
