//! prun on its error paths: usage, shapes, durations, modes, an unreachable master, srun spellings.

use super::*;

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
