//! gangctl on its error paths, and gangctl start before any cluster runs.

use super::*;

#[test]
fn gangctl_reports_an_unreachable_master() {
    for cmd in [
        &["jobs"][..],
        &["job", "3"],
        &["nodes"],
        &["slices"],
        &["slices", "--watch"],
        &["stats"],
        &["cancel", "1"],
        &["drain", "1,1"],
    ] {
        let mut args = vec!["--master", "unix:/nonexistent/gang-1.sock"];
        args.extend_from_slice(cmd);
        let o = run(GANGCTL, &args);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}");
        let err = stderr(&o);
        assert!(
            err.starts_with("gangctl: cannot reach the master at unix:/nonexistent/gang-1.sock: "),
            "{cmd:?}: {err}"
        );
    }
    // Global flags go after the subcommand too, and the environment works; under
    // --output json the error is a JSON object on stderr.
    let o = Command::new(GANGCTL)
        .args(["nodes", "--output", "json"])
        .env("GANG_MASTER", "unix:/nonexistent/gang-1.sock")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    let e: serde_json::Value = serde_json::from_str(&stderr(&o)).expect("one JSON object");
    assert_eq!(e["code"], "UNAVAILABLE", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot reach the master at unix:/nonexistent/gang-1.sock: "),
        "{e}"
    );
}

/// Every error under `--output json` is `{"code","message"}` on stderr, usage errors too.
#[test]
fn gangctl_json_errors_are_objects() {
    for (args, code, exit, says) in [
        (
            &["--output", "json", "drain", "1x2"][..],
            "USAGE",
            2,
            "expected a node as X,Y",
        ),
        (&["--output=json", "frobnicate"], "USAGE", 2, "frobnicate"),
        (&["--output", "json"], "USAGE", 2, "requires a subcommand"),
        (
            &["job", "x", "--output", "json"],
            "USAGE",
            2,
            "invalid value 'x'",
        ),
    ] {
        let o = run(GANGCTL, args);
        assert_eq!(o.status.code(), Some(exit), "{args:?}: {}", stderr(&o));
        let e: serde_json::Value = serde_json::from_str(&stderr(&o))
            .unwrap_or_else(|_| panic!("{args:?}: not JSON: {}", stderr(&o)));
        assert_eq!(e["code"], code, "{args:?}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(says),
            "{args:?}: {e}"
        );
    }
    // Help is still help.
    let o = run(GANGCTL, &["--output", "json", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Usage"), "{}", stdout(&o));
}

#[test]
fn gangctl_usage_errors() {
    let o = run(GANGCTL, &["drain", "1x2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected a node as X,Y"),
        "{}",
        stderr(&o)
    );

    let o = run(GANGCTL, &["resume", "a,b"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected a node as X,Y"),
        "{}",
        stderr(&o)
    );

    let o = run(GANGCTL, &["start", "--mesh", "4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected the mesh as WxH"),
        "{}",
        stderr(&o)
    );

    let o = run(GANGCTL, &["job", "x"]);
    assert_eq!(o.status.code(), Some(2));

    for args in [
        &["start", "--mesh", "2x2", "--quantum-ms", "0"][..],
        &["start", "--mesh", "2x2", "--quantum-ms", "60001"],
        &["start", "--mesh", "2x2", "--gang-mode", "strict"],
    ] {
        let o = run(GANGCTL, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }

    let o = run(GANGCTL, &["--output", "yaml", "jobs"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[possible values: cli, json]"),
        "{}",
        stderr(&o)
    );

    let o = run(GANGCTL, &[]);
    assert_eq!(o.status.code(), Some(2));

    // `token revoke` takes exactly one of TOKEN, --id, --user, and no flags of `token`.
    for args in [
        &["token", "revoke"][..],
        &["token", "revoke", "TOKEN", "--user", "alice"],
        &["token", "revoke", "--id", "ab", "--user", "alice"],
        &["token", "--ttl", "1h", "revoke", "--user", "alice"],
    ] {
        let o = run(GANGCTL, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn gangctl_start_reports_missing_binaries() {
    let empty = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("cluster");
    let o = run(
        GANGCTL,
        &[
            "start",
            "--bin-dir",
            empty.path().to_str().unwrap(),
            "--mesh",
            "2x2",
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let expected = format!(
        "gangctl: gang-master not found next to gangctl in {}; build the workspace: cargo build --release\n",
        empty.path().display()
    );
    assert_eq!(err, expected);
    assert!(!dir.exists(), "nothing is created when a binary is missing");
}

#[test]
fn gangctl_start_reports_a_missing_agent() {
    // A gang-master is there (any file will do: it is never run), the agent is not.
    let bins = tempfile::tempdir().unwrap();
    std::fs::write(bins.path().join("gang-master"), "").unwrap();
    let o = run(
        GANGCTL,
        &[
            "start",
            "--bin-dir",
            bins.path().to_str().unwrap(),
            "--mesh",
            "1x1",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("gangctl: gang-agent not found next to gangctl in "),
        "{}",
        stderr(&o)
    );
}

/// `gangctl start` hands --mpl, --quantum-ms, --gang-mode and --master-arg to the master
/// and --agent-arg to every agent (fake binaries that print their arguments).
#[test]
fn gangctl_start_passes_flags_to_the_daemons() {
    use std::os::unix::fs::PermissionsExt;
    let bins = tempfile::tempdir().unwrap();
    let master = "#!/bin/sh\n\
        echo \"master args: $*\"\n\
        while [ $# -gt 0 ]; do\n\
          if [ \"$1\" = --ready-file ]; then printf 'grpc=127.0.0.1:1\\nagents=127.0.0.1:1\\nsocket=/nonexistent/m.sock\\nmetrics=127.0.0.1:1\\n' > \"$2\"; fi\n\
          shift\n\
        done\n\
        exec sleep 30\n";
    let agent = "#!/bin/sh\necho \"agent args: $*\"\nexit 4\n";
    for (name, text) in [("gang-master", master), ("gang-agent", agent)] {
        let p = bins.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let work = tempfile::tempdir().unwrap();
    let o = run(
        GANGCTL,
        &[
            "start",
            "--bin-dir",
            bins.path().to_str().unwrap(),
            "--dir",
            work.path().to_str().unwrap(),
            "--mesh",
            "1x1",
            "--mpl",
            "2",
            "--quantum-ms",
            "100",
            "--gang-mode",
            "priority",
            "--master-arg=--table-lead-ms",
            "--master-arg",
            "40",
            "--agent-arg",
            "--clock",
            "--agent-arg=host",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("gangctl: the agent of node 0,0 exited with 4"),
        "{err}"
    );
    assert!(
        err.contains("agent args: --master https://127.0.0.1:1 --tls-ca "),
        "{err}"
    );
    assert!(err.trim_end().ends_with(" --clock host"), "{err}");
    let log = std::fs::read_to_string(work.path().join("master.log")).unwrap();
    assert!(log.starts_with("master args: --listen "), "{log}");
    assert!(
        log.contains(" --mpl 2 ")
            && log
                .trim_end()
                .ends_with(" --quantum-ms 100 --gang-mode priority --table-lead-ms 40"),
        "{log}"
    );
}

#[test]
fn the_master_comes_from_the_client_config_file_below_flag_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("client.toml");
    std::fs::write(&cfg, "master = \"unix:/nonexistent/gang-2.sock\"\n").unwrap();
    let with = |envs: &[(&str, &str)], bin: &str, args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args)
            .env_remove("GANG_MASTER")
            .env("GANG_CONFIG", &cfg)
            .stdin(Stdio::null());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let o = with(&[], PRUN, &["-n", "1", "--detach", "--", "true"]);
    assert!(
        stderr(&o).contains("cannot reach the master at unix:/nonexistent/gang-2.sock"),
        "{}",
        stderr(&o)
    );
    let o = with(&[], GANGCTL, &["jobs"]);
    assert!(
        stderr(&o).contains("cannot reach the master at unix:/nonexistent/gang-2.sock"),
        "{}",
        stderr(&o)
    );
    let o = with(
        &[("GANG_MASTER", "unix:/nonexistent/gang-3.sock")],
        PRUN,
        &["-n", "1", "--detach", "--", "true"],
    );
    assert!(
        stderr(&o).contains("unix:/nonexistent/gang-3.sock"),
        "{}",
        stderr(&o)
    );
    let o = with(
        &[],
        GANGCTL,
        &["--master", "unix:/nonexistent/gang-4.sock", "nodes"],
    );
    assert!(
        stderr(&o).contains("unix:/nonexistent/gang-4.sock"),
        "{}",
        stderr(&o)
    );
    // A malformed file, or a GANG_CONFIG naming no file, is an error that names it.
    std::fs::write(&cfg, "mastr = 1\n").unwrap();
    let o = with(&[], PRUN, &["-n", "1", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("client.toml") && stderr(&o).contains("mastr"),
        "{}",
        stderr(&o)
    );
    let o = with(
        &[("GANG_CONFIG", "/no/such/client.toml")],
        GANGCTL,
        &["jobs"],
    );
    assert!(
        stderr(&o).contains("cannot read config /no/such/client.toml"),
        "{}",
        stderr(&o)
    );
}

/// gangctl refuses an unknown option by name, with the closest real one.
#[test]
fn gangctl_refuses_unknown_options_by_name() {
    let o = run(GANGCTL, &["jobs", "--stat", "R"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("gangctl: unrecognized option '--stat'\n  did you mean '--state'?"),
        "{}",
        stderr(&o)
    );
}
