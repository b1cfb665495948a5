//! `srun` lines in a submitted script: a script ported from Slurm keeps them, and they
//! would run silently against a real Slurm where one is installed (or fail where none
//! is). Each is named on stderr, with what it would do here; the submission goes ahead.

use std::path::{Path, PathBuf};

/// The longest part of a line quoted in a warning.
const QUOTED: usize = 60;

/// The lines (numbered from 1, trimmed) that run `srun`: as a command of their own, after
/// `;`, `&&`, `||`, `|`, `&`, `(`, `$(` or a backquote, after variable assignments, or
/// by a path ending in `/srun`. Comments (`#SBATCH` lines among them) are not.
pub fn find(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.starts_with('#') && runs_srun(l))
        .collect()
}

fn runs_srun(line: &str) -> bool {
    // A comment after the command is not part of it.
    let code = line.split(" #").next().unwrap_or(line);
    code.split([';', '&', '|', '(', '`'])
        .map(|part| part.trim_start_matches('$'))
        .any(|part| {
            part.split_whitespace()
                .find(|w| !is_assignment(w) && !matches!(*w, "exec" | "time" | "then" | "do"))
                .is_some_and(|w| w == "srun" || w.ends_with("/srun"))
        })
}

/// `NAME=value` before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The first executable `srun` in `path` (a PATH value).
pub fn installed(path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .map(|dir| dir.join("srun"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// One warning line per `srun` line of the script `name`, with `srun` found at `srun`.
pub fn warnings(name: &str, text: &str, srun: Option<&Path>) -> Vec<String> {
    let what = match srun {
        Some(p) => format!(
            "srun is Slurm's ({}: it would ask the Slurm controller, not this cluster)",
            p.display()
        ),
        None => "srun is not installed here: the line will fail".to_string(),
    };
    find(text)
        .into_iter()
        .map(|(n, line)| {
            let quoted: String = line.chars().take(QUOTED).collect();
            let more = if quoted.len() < line.len() { "..." } else { "" };
            format!("{name}:{n}: {quoted}{more}: steps here are started with prun; {what}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_commands_are_found_and_comments_are_not() {
        let text = "#!/bin/bash\n#SBATCH -N 2\n# srun in a comment\nsrun hostname\n\
                    prun hostname\nOMP_NUM_THREADS=4 srun ./a.out\nmodule load x && srun -n 2 y\n\
                    echo srun\n/usr/bin/srun z # a comment with srun\nx=$(srun hostname)\n\
                    sruns\necho done # srun\n  exec srun q\n";
        let lines: Vec<usize> = find(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(lines, [4, 6, 7, 9, 10, 13]);
    }

    #[test]
    fn each_warning_names_the_line_and_what_srun_would_do() {
        let text = "#!/bin/sh\nsrun -n 4 hostname\n";
        assert_eq!(
            warnings("job.sh", text, Some(Path::new("/usr/bin/srun"))),
            [
                "job.sh:2: srun -n 4 hostname: steps here are started with prun; srun is Slurm's \
              (/usr/bin/srun: it would ask the Slurm controller, not this cluster)"
            ]
        );
        assert_eq!(
            warnings("job.sh", text, None),
            [
                "job.sh:2: srun -n 4 hostname: steps here are started with prun; srun is not \
              installed here: the line will fail"
            ]
        );
        let long = format!("srun {}\n", "x".repeat(100));
        assert!(warnings("j", &long, None)[0].contains("xxx...: steps"));
    }

    #[test]
    fn srun_is_looked_up_in_the_path_given() {
        let dir = tempfile::tempdir().unwrap();
        let srun = dir.path().join("srun");
        std::fs::write(&srun, "#!/bin/sh\n").unwrap();
        let empty = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([empty.path(), dir.path()]).unwrap();
        // Not executable: not a command.
        assert_eq!(installed(Some(&path)), None);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(installed(Some(&path)), Some(srun));
        assert_eq!(installed(Some(empty.path().as_os_str())), None);
        assert_eq!(installed(None), None);
    }
}
