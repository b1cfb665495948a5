//! Shell completions and man pages, generated from the same clap definitions the commands
//! parse with (`gangctl completions`, `gangctl man`), so they cannot drift from the options.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

pub use crate::gangctl::cli::Program;

fn command_of(prog: Program) -> clap::Command {
    match prog {
        Program::Gangctl => crate::gangctl::cli::Cli::command(),
        Program::Prun => crate::args::prun::Args::command(),
    }
}

fn name_of(prog: Program) -> &'static str {
    match prog {
        Program::Gangctl => "gangctl",
        Program::Prun => "prun",
    }
}

/// Write `prog`'s completion script for `shell` to `out`.
pub fn completions(shell: clap_complete::Shell, prog: Program, out: &mut dyn Write) {
    let mut cmd = command_of(prog);
    clap_complete::generate(shell, &mut cmd, name_of(prog), out);
}

/// Write the man pages of both commands into `dir` (made if missing): `prun.1`,
/// `gangctl.1` and one `gangctl-SUBCOMMAND.1` per subcommand. Returns the files written.
pub fn man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for prog in [Program::Prun, Program::Gangctl] {
        let cmd = command_of(prog);
        clap_mangen::generate_to(cmd, dir)?;
    }
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "1") {
            written.push(p);
        }
    }
    written.sort();
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_the_options_of_each_command() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            completions(shell, Program::Prun, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("time-limit"), "{shell}: {text}");
            let mut out = Vec::new();
            completions(shell, Program::Gangctl, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(
                text.contains("drain") && text.contains("--since"),
                "{shell}"
            );
        }
    }

    #[test]
    fn man_pages_for_both_commands_and_each_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let pages = man_pages(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in ["prun.1", "gangctl.1", "gangctl-cancel.1", "gangctl-jobs.1"] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        let prun = std::fs::read_to_string(dir.path().join("prun.1")).unwrap();
        assert!(
            prun.starts_with(".ie") || prun.contains(".TH prun"),
            "{prun}"
        );
        assert!(prun.contains("time\\-limit"), "options in the page");
    }
}
