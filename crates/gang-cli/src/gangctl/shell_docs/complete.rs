//! Shell completions, asked of gangctl at each Tab (clap's dynamic completion): the
//! script a shell loads only hands the command line to `gangctl`, which completes it from
//! the clap definitions, with the values they cannot list themselves: job states, acct's
//! columns, and the job ids of the running cluster ([`super::job_ids`]). bash, zsh and
//! fish call it the same way, so the three cannot disagree, and a script need not be
//! regenerated when an option is added.
//!
//! gangctl answers for prun too (`GANG_COMPLETE_PRUN`), so prun itself knows nothing of
//! completion.

use std::ffi::OsStr;

use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use clap_complete::{ArgValueCompleter, CompleteEnv, CompletionCandidate};

use super::{Program, command_of};

/// The variable that asks gangctl for its own completions (`GANG_COMPLETE=bash gangctl --
/// gangctl jobs --st`); without words after `--`, for its shell script.
pub const GANGCTL_VAR: &str = "GANG_COMPLETE";
/// The same for prun's command line.
pub const PRUN_VAR: &str = "GANG_COMPLETE_PRUN";

/// At gangctl's start: if a shell asks for completions, answer on stdout and exit.
pub fn complete_if_asked() {
    let asked = |v| std::env::var_os(v).is_some_and(|s| !s.is_empty() && s != "0");
    if !asked(GANGCTL_VAR) && !asked(PRUN_VAR) {
        return;
    }
    // A Tab must not print on the terminal: a completer's trouble (no master) is silent.
    silence_stderr();
    CompleteEnv::with_factory(|| command_of(Program::Prun))
        .var(PRUN_VAR)
        .complete();
    CompleteEnv::with_factory(|| command_of(Program::Gangctl))
        .var(GANGCTL_VAR)
        .complete();
}

fn silence_stderr() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto stderr's descriptor, which stays open; no Rust object owns fd 2.
        unsafe {
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// The shell code that loads `prog`'s completions in `shell`, calling `completer` (a
/// gangctl, by path or by name) at each Tab.
pub fn script(shell: clap_complete::Shell, prog: Program, completer: &str) -> String {
    let (var, name) = match prog {
        Program::Gangctl => (GANGCTL_VAR, "gangctl"),
        Program::Prun => (PRUN_VAR, "prun"),
    };
    let adapter: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Zsh => &Zsh,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::PowerShell => &Powershell,
        // A shell clap adds later: bash's, the most common.
        _ => &Bash,
    };
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = adapter.write_registration(var, name, name, completer, &mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        clap_complete::Shell::Zsh => autoloadable(&text, name),
        _ => text,
    }
}

/// zsh's script, made to work also as an autoloaded `_prun` in a site-functions
/// directory: loaded so, its body runs at the first Tab and must complete then (clap's
/// only registers its function with compdef, which would leave that first Tab empty).
fn autoloadable(text: &str, name: &str) -> String {
    let func = format!("_clap_dynamic_completer_{}", name.replace('-', "_"));
    let register = format!("compdef {func} {name}");
    let Some(head) = text.trim_end().strip_suffix(&register) else {
        return text.to_string();
    };
    format!(
        "{head}if [ \"$funcstack[1]\" = \"_{name}\" ]; then\n    {func} \"$@\"\nelse\n    {register}\nfi\n"
    )
}

/// The words of a comma-separated list (`running,PD`, `jobid,elapsed`) that can follow
/// what is typed: the list so far, then each word not in it yet that starts with the last
/// part typed (in its case if any does, else in any case: sacct's `JobID`).
pub fn comma_list(current: &OsStr, words: &[(&str, &str)]) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let (done, last) = match current.rsplit_once(',') {
        Some((done, last)) => (format!("{done},"), last),
        None => (String::new(), current.as_ref()),
    };
    let taken: Vec<String> = done.split(',').map(str::to_ascii_lowercase).collect();
    let fresh = |w: &&(&str, &str)| !taken.contains(&w.0.to_ascii_lowercase());
    let mut fit: Vec<&(&str, &str)> = words
        .iter()
        .filter(fresh)
        .filter(|w| w.0.starts_with(last))
        .collect();
    if fit.is_empty() {
        let low = last.to_ascii_lowercase();
        fit = words
            .iter()
            .filter(fresh)
            .filter(|w| w.0.to_ascii_lowercase().starts_with(&low))
            .collect();
    }
    fit.into_iter()
        .map(|(w, help)| {
            CompletionCandidate::new(format!("{done}{w}")).help(Some(help.to_string().into()))
        })
        .collect()
}

/// `--state`'s words: the labels gangctl prints, then Slurm's codes (every one is
/// accepted by `job_filter::parse_states`: a test holds them to it).
pub const STATES: &[(&str, &str)] = &[
    ("queued", "waiting for nodes (PD)"),
    ("starting", "placed, its ranks starting (CF)"),
    ("running", "R"),
    ("completed", "ended with exit code 0 (CD)"),
    ("failed", "ended otherwise (F)"),
    ("cancelled", "CA"),
    ("timeout", "ended by its time limit (TO)"),
    ("active", "queued, starting or running"),
    ("PD", "queued"),
    ("CF", "starting"),
    ("R", "running"),
    ("CD", "completed"),
    ("F", "failed"),
    ("CA", "cancelled"),
    ("TO", "timeout"),
];

/// `--state S,...`: job states.
pub fn states() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| comma_list(current, STATES))
}

/// `gangctl acct --format`: its columns, as `jobs/acct.rs` names them.
pub fn columns() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        let words: Vec<(&str, &str)> = crate::jobs::acct::COLUMNS
            .iter()
            .map(|c| (c.0, c.2))
            .collect();
        comma_list(current, &words)
    })
}
