//! The master's configuration edge: the shipped example parses, bad input is refused
//! with a message naming the problem.

use std::path::Path;
use std::process::Command;

use gang_master::config::FileConfig;

fn master(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gang-master"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn shipped_example_config_parses() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/master.toml");
    let c = FileConfig::load(&p).unwrap();
    assert_eq!(c.mesh.as_deref(), Some("4x4"));
    assert_eq!(c.mpl, Some(4));
    assert_eq!(c.quantum_ms, Some(50));
    assert_eq!(c.gang_mode.as_deref(), Some("stop"));
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
fn state_database_of_another_mesh_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    {
        let store = gang_master::store::Store::open(&db).unwrap();
        store.set_mesh("2x2").unwrap();
    }
    let out = master(&[
        "--mesh",
        "4x4",
        "--state",
        db.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("made for a 2x2 mesh, not 4x4"), "{err}");
}
