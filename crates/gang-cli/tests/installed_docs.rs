//! `gangctl install` as a user meets it: the real command into a temporary prefix, then
//! `man prun` (man-db, through MANPATH and through PATH alone), and bash completing with
//! the installed script: states, acct's columns, and the job ids of a real local cluster.
//! A prefix the user cannot write is refused, naming it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use common::{GANGCTL, PRUN, T, cluster, detach, text, wait_job};

fn install(prefix: &Path) -> Output {
    Command::new(GANGCTL)
        .args(["install", "--prefix"])
        .arg(prefix)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

fn installed(prefix: &Path) {
    let o = install(prefix);
    assert!(o.status.success(), "gangctl install: {o:?}");
    let out = text(&o.stdout);
    assert!(
        out.starts_with(&format!("installed into {}:", prefix.display())),
        "{out}"
    );
    for line in ["  bin: prun gangctl", "  share/man/man1: prun.1 gangctl.1"] {
        assert!(out.contains(line), "{line} in {out}");
    }
    for f in ["bin/prun", "bin/gangctl", "share/man/man1/gangctl-cancel.1"] {
        assert!(prefix.join(f).is_file(), "{f}");
    }
}

/// `man ARGS` with `env`, MANPATH and pagers unset unless given: stdout.
fn man(args: &[&str], env: &[(&str, String)]) -> String {
    let mut cmd = Command::new("man");
    cmd.args(args)
        .env_remove("MANPATH")
        .env_remove("MANPAGER")
        .env_remove("PAGER")
        .env("MANWIDTH", "120");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd
        .output()
        .expect("man (man-db: sh scripts/setup-test-deps.sh installs it)");
    assert!(o.status.success(), "man {args:?}: {o:?}");
    text(&o.stdout)
}

/// What bash, with `prog`'s installed completion script sourced and nothing else (no
/// bash-completion, no rc file), offers for `words` (the last one being completed).
fn bash_completes(prefix: &Path, words: &[&str], master: &str) -> (Vec<String>, String) {
    let script = prefix
        .join("share/bash-completion/completions")
        .join(words[0]);
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        r#"source '{}'
COMP_WORDS=({})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9
_clap_complete_{} '{}' "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        script.display(),
        quoted.join(" "),
        words[0],
        words[0],
    );
    let o = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .env("GANG_MASTER", master)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(o.status.success(), "bash: {o:?}");
    let offered = text(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    (offered, text(&o.stderr))
}

#[test]
fn man_finds_the_installed_pages_and_bash_the_completions() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    installed(&prefix);
    let page = prefix.join("share/man/man1/prun.1");
    let first = std::fs::read(&page).unwrap();
    // Again: nothing changes, and it says so.
    let again = install(&prefix);
    assert!(again.status.success(), "{again:?}");
    assert!(
        text(&again.stdout).contains("  bin: prun gangctl gang-master gang-agent (unchanged)"),
        "{again:?}"
    );
    assert_eq!(std::fs::read(&page).unwrap(), first);
    assert!(
        text(&again.stdout).contains(&format!("export PATH=\"{}/bin:$PATH\"", prefix.display())),
        "PREFIX/bin is not in PATH: the line that puts it there: {again:?}"
    );

    let manpath = prefix.join("share/man").display().to_string();
    let prun = man(&["-P", "cat", "prun"], &[("MANPATH", manpath)]);
    for want in [
        "SYNOPSIS",
        "--ntasks",
        "ENVIRONMENT",
        "GANG_RANK",
        "GANG_ALLOCATION_ID",
    ] {
        assert!(prun.contains(want), "{want} in man prun:\n{prun}");
    }
    let exits = &prun[prun.find("EXIT STATUS").expect("EXIT STATUS in man prun")..];
    assert!(exits.contains("130") && exits.contains("124"), "{exits}");
    // With PREFIX/bin in PATH, man-db looks in PREFIX/share/man by itself.
    let path = format!("{}:/usr/bin:/bin", prefix.join("bin").display());
    for name in ["prun", "gangctl-jobs"] {
        let found = man(&["-w", name], &[("PATH", path.clone())]);
        assert_eq!(
            found.trim(),
            prefix
                .join(format!("share/man/man1/{name}.1"))
                .display()
                .to_string()
        );
    }

    let none = "unix:/nonexistent/master.sock";
    let (offered, _) = bash_completes(&prefix, &["gangctl", "jobs", "--state", ""], none);
    for s in ["running", "queued", "PD", "R"] {
        assert!(offered.iter().any(|o| o == s), "{s} in {offered:?}");
    }
    let (offered, _) = bash_completes(&prefix, &["gangctl", "jobs", "--state", "run"], none);
    assert_eq!(offered, ["running"]);
    let (offered, _) = bash_completes(&prefix, &["gangctl", "acct", "-o", "jobid,ela"], none);
    assert_eq!(offered, ["jobid,elapsed"]);
    let (offered, _) = bash_completes(&prefix, &["prun", "--time-l"], none);
    assert_eq!(offered, ["--time-limit"]);
}

#[test]
fn job_ids_complete_from_the_running_cluster() {
    let Some(c) = cluster((2, 1), 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("p");
    installed(&prefix);
    let master = c.master_addr().to_string();
    let ended = detach(&c, &["-n", "1", "--", "true"]);
    wait_job(&c, ended, "completed", |j| j["state"] == "completed");
    let running = detach(&c, &["-n", "2x1", "--", "sleep", "300"]);
    wait_job(&c, running, "running", |j| j["state"] == "running");

    let (offered, stderr) = bash_completes(&prefix, &["gangctl", "cancel", ""], &master);
    assert!(
        offered.contains(&running.to_string()),
        "{running} in {offered:?}: {stderr}"
    );
    assert!(
        !offered.contains(&ended.to_string()),
        "an ended job is not cancelled: {offered:?}"
    );
    let (offered, _) = bash_completes(&prefix, &["gangctl", "job", ""], &master);
    for id in [running, ended] {
        assert!(offered.contains(&id.to_string()), "{id} in {offered:?}");
    }
    let list = format!("{ended},");
    let (offered, _) = bash_completes(&prefix, &["gangctl", "jobs", &list], &master);
    assert!(
        offered.contains(&format!("{ended},{running}")),
        "{offered:?}"
    );

    // No master: no ids, nothing printed, and no long wait.
    let started = Instant::now();
    let gone = "unix:/nonexistent/master.sock";
    let (offered, stderr) = bash_completes(&prefix, &["gangctl", "cancel", "1"], gone);
    assert!(
        offered.is_empty() && stderr.is_empty(),
        "{offered:?} {stderr}"
    );
    assert!(started.elapsed() < T / 4, "{:?}", started.elapsed());
    let o = common::run(GANGCTL, &c, &["cancel", &running.to_string()]);
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn a_prefix_that_cannot_be_written_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(dir.path(), 0o755).unwrap();
    // The binaries where another user may run them.
    let from = dir.path().join("build");
    std::fs::create_dir(&from).unwrap();
    for bin in [GANGCTL, PRUN] {
        let to = from.join(Path::new(bin).file_name().unwrap());
        std::fs::copy(bin, to).unwrap();
    }
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    open(&locked, 0o555).unwrap();
    let prefix = locked.join("prefix");
    let mut cmd = if nix::unistd::geteuid().is_root() {
        // Root writes anywhere: as nobody, root's directory is locked.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.arg(from.join("gangctl"));
        c
    } else {
        Command::new(from.join("gangctl"))
    };
    let o = cmd
        .arg("install")
        .arg("--prefix")
        .arg(&prefix)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let want = format!("gangctl: cannot install into {}", prefix.display());
    assert!(err.contains(&want), "{want} in {err}");
    assert!(
        err.contains("Permission denied") && err.contains("--prefix"),
        "{err}"
    );
    assert!(text(&o.stdout).is_empty() && !prefix.exists(), "{o:?}");
}
