//! The real `prun` and `gangctl` binaries on the error paths that need no cluster.
//!
//! End-to-end tests against a running cluster need `gang-master` and `gang-agent` built in
//! the same target directory (see the `gang-local` crate); these do not.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const PRUN: &str = env!("CARGO_BIN_EXE_prun");
const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

/// Run a binary with no GANG_* settings from the environment and stdin on /dev/null.
fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("GANG_MASTER")
        .env_remove("GANG_OUTPUT")
        .env("GANG_CONFIG", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn prun_without_a_command_is_a_usage_error() {
    for args in [&["-n", "4x2"][..], &["-n", "4x2", "--"][..]] {
        let o = run(PRUN, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("<CMD>"), "{}", stderr(&o));
        assert!(stderr(&o).contains("Usage: prun"), "{}", stderr(&o));
    }
    let o = run(PRUN, &["-n", "4x2", "--", ""]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the command is empty"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn prun_needs_a_shape() {
    let o = run(PRUN, &["hostname"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--nodes <SHAPE>"), "{}", stderr(&o));
}

#[test]
fn prun_rejects_bad_durations() {
    let o = run(PRUN, &["-n", "2", "--time-limit", "10x", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected a duration: MM, MM:SS, HH:MM:SS, D-HH"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn prun_rejects_unknown_gang_modes() {
    let o = run(PRUN, &["-n", "2", "--gang", "strict", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("[possible values: stop, priority, none, freeze]"),
        "{err}"
    );
    // From the environment too.
    let o = Command::new(PRUN)
        .args(["-n", "2", "--", "true"])
        .env("GANG_MODE", "sometimes")
        .env("GANG_CONFIG", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sometimes"), "{}", stderr(&o));
    // A valid mode gets as far as the (unreachable) master.
    for mode in ["stop", "priority", "none", "freeze"] {
        let o = run(
            PRUN,
            &[
                "--master",
                "unix:/nonexistent/gang-1.sock",
                "-n",
                "2",
                "--gang",
                mode,
                "--",
                "true",
            ],
        );
        assert_eq!(o.status.code(), Some(1), "{mode}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot reach the master"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn prun_reports_an_unreachable_master() {
    let o = run(
        PRUN,
        &[
            "--master",
            "unix:/nonexistent/gang-1.sock",
            "-n",
            "4x2",
            "--",
            "hostname",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("prun: cannot reach the master at unix:/nonexistent/gang-1.sock: "),
        "{err}"
    );
    assert!(
        err.contains("`gangctl start`") && err.contains("GANG_MASTER"),
        "says what to do: {err}"
    );
    assert!(stdout(&o).is_empty());
}

/// An unknown option is refused by name before anything is submitted (it used to become
/// the command), with the closest real option or what Slurm's option means here.
#[test]
fn prun_refuses_unknown_options_by_name() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-n", "2", "--time-limt", "5m", "--", "hostname"],
            "prun: unrecognized option '--time-limt'\n  did you mean '--time-limit'?\n",
        ),
        (
            &["-n", "2", "--mem=4G", "hostname"],
            "prun: unrecognized option '--mem'\n  --mem is Slurm's: a rank has its whole node",
        ),
        (
            &["-n", "2", "-pdebug", "hostname"],
            "prun: unrecognized option '-p'\n  -p is Slurm's: there are no partitions",
        ),
        (
            &["-n", "2", "--partition=debug", "hostname"],
            "  --partition is Slurm's: there are no partitions: the cluster is one mesh",
        ),
    ];
    for (args, want) in cases {
        let o = run(PRUN, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("Try 'prun --help'"), "{}", stderr(&o));
    }
}

/// srun's spellings and attached values reach the master (here: an unreachable one, so
/// parsing got through), and the program's own options stay its own.
#[test]
fn prun_takes_srun_spellings_and_attached_values() {
    let master = "unix:/nonexistent/gang-3.sock";
    for args in [
        &["-n2x2", "-t5m", "hostname"][..],
        &["-N", "4", "hostname"],
        &["-N4", "--time=1:00", "hostname"],
        &["--ntasks", "4", "-J", "x", "-D", "/tmp", "hostname"],
        &["-n", "4", "--job-name=y", "--chdir=/tmp", "hostname"],
        &["-n", "2", "./a.out", "--size", "100", "-x"],
    ] {
        let mut all = vec!["--master", master];
        all.extend_from_slice(args);
        let o = run(PRUN, &all);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot reach the master"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = run(PRUN, &["-t5x", "-n", "2", "hostname"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(PRUN, &["-n", "2", "--dependency=afterok:x", "hostname"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("\"x\" is not a job id"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn prun_takes_the_master_from_the_environment() {
    let o = Command::new(PRUN)
        .args(["-n", "2", "--detach", "--", "true"])
        .env("GANG_MASTER", "unix:/nonexistent/gang-1.sock")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("prun: cannot reach the master at unix:/nonexistent/gang-1.sock: "),
        "{}",
        stderr(&o)
    );
}

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
fn help_of_every_command() {
    let o = run(PRUN, &["--help"]);
    assert!(o.status.success());
    let text = stdout(&o);
    for flag in [
        "--nodes",
        "--label",
        "--detach",
        "--time-limit",
        "D-HH:MM:SS",
        "--exact",
        "--name",
        "--master",
        "GANG_MASTER",
        "--gang",
        "GANG_MODE",
        "SIGSTOP",
        "nice +15",
        "cgroup freezer",
    ] {
        assert!(text.contains(flag), "prun --help lacks {flag}:\n{text}");
    }

    let o = run(GANGCTL, &["--help"]);
    assert!(o.status.success());
    let text = stdout(&o);
    for sub in [
        "start", "jobs", "job", "cancel", "nodes", "slices", "stats", "drain", "resume", "--output",
    ] {
        assert!(text.contains(sub), "gangctl --help lacks {sub}:\n{text}");
    }

    let subs: &[(&str, &[&str])] = &[
        (
            "start",
            &[
                "--mesh",
                "--mpl",
                "--quantum-ms",
                "--gang-mode",
                "--master-arg",
                "--agent-arg",
                "--keep",
                "--dir",
                "CMD",
            ],
        ),
        (
            "jobs",
            &[
                "--all",
                "--limit",
                "IDS|RANGES|last",
                "--user",
                "--state",
                "timeout (TO)",
                "--since",
                "(priority)",
            ],
        ),
        ("job", &["<ID>"]),
        ("cancel", &["[IDS|RANGES]...", "--user", "--state", "71-75"]),
        ("nodes", &["--master"]),
        (
            "slices",
            &[
                "--watch",
                "--interval-ms",
                "row y=H-1 at the top",
                "▶ running",
            ],
        ),
        (
            "stats",
            &["skew", "switch latency", "switch cost", "p99_ns"],
        ),
        ("drain", &["<X,Y>", "0-3,1"]),
        ("resume", &["<X,Y>"]),
    ];
    for (sub, words) in subs {
        let o = run(GANGCTL, &[sub, "--help"]);
        assert!(o.status.success(), "gangctl {sub} --help: {}", stderr(&o));
        let text = stdout(&o);
        for w in *words {
            assert!(text.contains(w), "gangctl {sub} --help lacks {w}:\n{text}");
        }
        assert!(!text.contains("--bin-dir"), "--bin-dir is hidden");
    }
}

#[test]
fn binaries_sit_together() {
    // LocalCluster looks for gang-master / gang-agent next to gangctl.
    assert_eq!(Path::new(PRUN).parent(), Path::new(GANGCTL).parent());
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

/// Completions and man pages come from the real binary; bash loads the script and
/// completes prun's options from it.
#[test]
fn completions_and_man_pages() {
    let o = run(GANGCTL, &["completions", "bash", "prun"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("prun.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    // Complete `prun --time-l<TAB>` as bash would.
    let probe = format!(
        "source {}; COMP_WORDS=(prun --time-l); COMP_CWORD=1; COMP_LINE='prun --time-l'; \
         COMP_POINT=${{#COMP_LINE}}; _prun prun --time-l prun; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let b = Command::new("bash").args(["-c", &probe]).output().unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(String::from_utf8_lossy(&b.stdout).trim(), "--time-limit");

    for shell in ["zsh", "fish"] {
        let o = run(GANGCTL, &["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains("drain"), "{shell}");
    }
    let o = run(GANGCTL, &["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));

    let man = dir.path().join("man1");
    let o = run(GANGCTL, &["man", man.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("man pages written to"),
        "{}",
        stderr(&o)
    );
    let prun = std::fs::read_to_string(man.join("prun.1")).unwrap();
    assert!(prun.contains(".TH prun"), "{prun}");
    assert!(man.join("gangctl-cancel.1").is_file());
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
