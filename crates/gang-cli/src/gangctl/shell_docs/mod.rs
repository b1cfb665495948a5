//! Shell completions and man pages, generated from the same clap definitions the commands
//! parse with, so they cannot drift from the options, and installed with the binaries.
//!
//! - [`complete`]: completions asked of gangctl at each Tab (`gangctl completions SHELL`
//!   prints the script that loads them), with job states and acct's columns.
//! - [`job_ids`]: the job ids of the running cluster, for a Tab.
//! - [`man_page`]: one page, with SYNOPSIS, ENVIRONMENT, EXIT STATUS and EXAMPLES.
//! - [`environment`], [`exit_status`]: what those two sections list, held to the code.
//! - [`install`]: `gangctl install`.

pub mod complete;
mod environment;
mod exit_status;
pub mod install;
pub mod job_ids;
mod man_page;

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

pub use crate::gangctl::cli::Program;

/// `prog`'s command line, as its parser has it.
pub fn command_of(prog: Program) -> clap::Command {
    match prog {
        Program::Gangctl => crate::gangctl::cli::Cli::command(),
        Program::Prun => crate::args::prun::Args::command(),
    }
}

/// Write the script that loads `prog`'s completions in `shell` to `out`: it calls this
/// gangctl (by the name or path it was run by) at each Tab.
pub fn completions(
    shell: clap_complete::Shell,
    prog: Program,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    out.write_all(complete::script(shell, prog, &this_gangctl()).as_bytes())
}

/// This gangctl as it was called: a bare name (found in PATH) as it is, a path made
/// absolute, so that the script works from any directory.
fn this_gangctl() -> String {
    let arg0 = PathBuf::from(
        std::env::args_os()
            .next()
            .unwrap_or_else(|| "gangctl".into()),
    );
    if arg0.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(arg0).display().to_string();
    }
    arg0.display().to_string()
}

/// Every man page: `prun.1`, `gangctl.1` and one `gangctl-SUBCOMMAND.1` per subcommand
/// (`gangctl-certs-init.1` for nested ones), with their text.
pub fn pages() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for prog in [Program::Prun, Program::Gangctl] {
        let mut cmd = command_of(prog).disable_help_subcommand(true);
        cmd.build();
        walk(&cmd, prog, None, &mut out);
    }
    out
}

fn walk(cmd: &clap::Command, prog: Program, sub: Option<&str>, out: &mut Vec<(String, String)>) {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    out.push((format!("{name}.1"), man_page::render(cmd, prog, sub)));
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let path = match sub {
            Some(p) => format!("{p} {}", s.get_name()),
            None => s.get_name().to_string(),
        };
        walk(s, prog, Some(&path), out);
    }
}

/// Write every man page into `dir` (made if missing). Returns the files written.
pub fn man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, text) in pages() {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

#[cfg(test)]
mod tests;
