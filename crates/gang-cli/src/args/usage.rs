//! Usage errors as getopt users read them: `prun: unrecognized option '--time-limt'`, the
//! closest real option, and, for an option Slurm's `srun`/`sbatch` have and we do not, what
//! to do here instead.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Slurm options with no equivalent flag here, and what to do instead. Options that do
/// mean the same here are aliases of ours or options of their own (`-N`, `-n`, `-u`, `--pty`, `-J`, `-D`, `--time`), not
/// entries of this table.
pub const SLURM_HINTS: &[(&str, &str)] = &[
    (
        "-p",
        "there are no partitions: the cluster is one mesh; drop it",
    ),
    (
        "--partition",
        "there are no partitions: the cluster is one mesh; drop it",
    ),
    ("-A", "there are no accounts here; drop it"),
    ("--account", "there are no accounts here; drop it"),
    ("--mem", "a rank has its whole node; drop it"),
    ("--mem-per-cpu", "a rank has its whole node; drop it"),
    ("-c", "a rank has its whole node; drop it"),
    ("--cpus-per-task", "a rank has its whole node; drop it"),
    (
        "--ntasks-per-node",
        "one rank runs on each node: ask for nodes with -n",
    ),
    (
        "--exclusive",
        "a job always has its nodes to itself in its time slices; drop it",
    ),
    (
        "-w",
        "jobs are placed as rectangles of the mesh by the master: ask a shape with -n WxH",
    ),
    (
        "--nodelist",
        "jobs are placed as rectangles of the mesh by the master: ask a shape with -n WxH",
    ),
];

/// Parse `P`'s arguments; on a usage error print it as `PROG: ...` (with a suggestion or a
/// Slurm hint for an unknown option) and exit 2. Help and version print as clap does.
pub fn parse_or_exit<P: clap::Parser>(prog: &str) -> P {
    match P::try_parse() {
        Ok(p) => p,
        Err(e) => exit_with(prog, e),
    }
}

/// Print a clap error the way [`parse_or_exit`] does and exit.
pub fn exit_with(prog: &str, e: clap::Error) -> ! {
    match e.kind() {
        ErrorKind::UnknownArgument => {
            eprint!("{}", unknown_option_message(prog, &e));
            std::process::exit(2);
        }
        _ => e.exit(),
    }
}

/// `PROG: unrecognized option 'X'` and a line of advice: Slurm's meaning here, else clap's
/// closest real option, then how to get help.
pub fn unknown_option_message(prog: &str, e: &clap::Error) -> String {
    let text = |k| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let arg = text(ContextKind::InvalidArg).unwrap_or_default();
    // "-t5m" or "--time=5m": the option is the part before its value.
    let name = option_name(&arg);
    let mut out = format!("{prog}: unrecognized option '{arg}'\n");
    if let Some((_, hint)) = SLURM_HINTS.iter().find(|(o, _)| *o == name) {
        out.push_str(&format!("  {name} is Slurm's: {hint}\n"));
    } else if let Some(s) = text(ContextKind::SuggestedArg) {
        out.push_str(&format!("  did you mean '{s}'?\n"));
    } else if arg.starts_with('-') {
        out.push_str("  (a command that starts with '-' goes after --)\n");
    }
    out.push_str(&format!("Try '{prog} --help' for more information.\n"));
    out
}

fn option_name(arg: &str) -> &str {
    if let Some(long) = arg.strip_prefix("--") {
        let end = long.find('=').map_or(arg.len(), |i| i + 2);
        &arg[..end]
    } else if arg.starts_with('-') && arg.len() > 2 {
        &arg[..2]
    } else {
        arg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_names_lose_their_values() {
        assert_eq!(option_name("--mem=4G"), "--mem");
        assert_eq!(option_name("--mem"), "--mem");
        assert_eq!(option_name("-p"), "-p");
        assert_eq!(option_name("-pdebug"), "-p");
        assert_eq!(option_name("x"), "x");
    }

    #[test]
    fn every_hint_names_an_option() {
        for (o, hint) in SLURM_HINTS {
            assert!(o.starts_with('-') && !hint.is_empty(), "{o}");
        }
    }
}
