//! Help, completions and man pages of every command.

use super::*;

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

/// Completions and man pages come from the real binary; bash loads the script and
/// completes prun's options through it (the script asks gangctl at each Tab).
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
         COMP_POINT=${{#COMP_LINE}}; _clap_complete_prun prun --time-l prun; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let b = Command::new("bash").args(["-c", &probe]).output().unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(String::from_utf8_lossy(&b.stdout).trim(), "--time-limit");

    for shell in ["zsh", "fish"] {
        let o = run(GANGCTL, &["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("GANG_COMPLETE"),
            "{shell}: {}",
            stdout(&o)
        );
        assert!(stdout(&o).contains(GANGCTL), "{shell} calls this gangctl");
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
