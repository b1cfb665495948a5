//! One man page: clap_mangen's sections where they say all (NAME, DESCRIPTION, OPTIONS,
//! SUBCOMMANDS, VERSION) and our own around them: a SYNOPSIS with every spelling of every
//! option (clap_mangen's leaves out aliases, so prun's -N, --ntasks and --time were
//! missing, and the values), ENVIRONMENT, EXIT STATUS, EXAMPLES (the commands' own
//! `Examples:`), NOTES and SEE ALSO.

use std::io::Write;

use clap::{Arg, Command};
use clap_mangen::Man;
use roff::{Inline, Roff, bold, italic, roman};

use super::environment::{CLIENT_ENV, RANK_ENV, SCRIPT_ENV, Var};
use super::{Program, exit_status};

/// The page of `cmd` (built), a subcommand of `prog` if `sub` names it ("jobs", "certs
/// init").
pub fn render(cmd: &Command, prog: Program, sub: Option<&str>) -> String {
    // Every page's footer names the project (a subcommand has no version of its own).
    let man = Man::new(with_spellings_in_help(cmd.clone()))
        .source(format!("gang {}", env!("CARGO_PKG_VERSION")));
    // roff's preamble (the apostrophe string the sections use), once.
    let mut page = Roff::new().render();
    page += &section(|w| man.render_title(w));
    page += &section(|w| man.render_name_section(w));
    page += &strip_preamble(synopsis(cmd).render());
    page += &section(|w| man.render_description_section(w));
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page += &section(|w| man.render_options_section(w));
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        page += &section(|w| man.render_subcommands_section(w));
    }
    let mut own = Roff::new();
    environment(&mut own, cmd, prog, sub);
    exit_statuses(&mut own, prog, sub);
    examples(&mut own, cmd, sub.is_none() && prog == Program::Gangctl);
    notes(&mut own, cmd);
    see_also(&mut own, prog, sub);
    page += &strip_preamble(own.render());
    if cmd.get_version().is_some() {
        page += &section(|w| man.render_version_section(w));
    }
    page
}

/// Every spelling of an option, as the parser takes it: `-n`, `-N`, `--nodes`, `--ntasks`.
pub fn spellings(a: &Arg) -> Vec<String> {
    let mut out: Vec<String> = a.get_short().map(|c| format!("-{c}")).into_iter().collect();
    out.extend(
        a.get_all_short_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("-{c}")),
    );
    out.extend(a.get_long().map(|l| format!("--{l}")));
    out.extend(
        a.get_all_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{l}")),
    );
    out
}

/// A section rendered by clap_mangen, without roff's preamble (the page has one).
fn section(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = f(&mut buf);
    strip_preamble(String::from_utf8_lossy(&buf).into_owned())
}

/// Without roff's preamble, which every rendering starts with.
fn strip_preamble(text: String) -> String {
    let preamble = Roff::new().render();
    match text.strip_prefix(&preamble) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// The options whose other spellings clap_mangen would not show, told in their help.
fn with_spellings_in_help(mut cmd: Command) -> Command {
    let told: Vec<(clap::Id, String)> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter_map(|a| {
            let main: Vec<String> = a
                .get_short()
                .map(|c| format!("-{c}"))
                .into_iter()
                .chain(a.get_long().map(|l| format!("--{l}")))
                .collect();
            let others: Vec<String> = spellings(a)
                .into_iter()
                .filter(|s| !main.contains(s))
                .collect();
            let help = a.get_long_help().or(a.get_help())?.to_string();
            (!others.is_empty()).then(|| {
                let help = help.trim_end().trim_end_matches('.');
                let help = format!("{help}. Also spelled {}.", others.join(", "));
                (a.get_id().clone(), help)
            })
        })
        .collect();
    for (id, help) in told {
        cmd = cmd.mut_arg(id, |a| a.long_help(help));
    }
    cmd
}

fn value_name(a: &Arg) -> String {
    a.get_value_names()
        .map(|v| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
}

/// `prun [-n|-N|--nodes|--ntasks SHAPE] ... CMD...`: every option with all its spellings
/// and its value.
fn synopsis(cmd: &Command) -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["SYNOPSIS"]);
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut line = vec![bold(name)];
    let options = cmd.get_arguments().filter(|a| {
        !a.is_positional()
            && !a.is_hide_set()
            && !["help", "version"].contains(&a.get_id().as_str())
    });
    for a in options {
        let required = a.is_required_set();
        line.push(roman(if required { " " } else { " [" }));
        for (i, s) in spellings(a).into_iter().enumerate() {
            if i > 0 {
                line.push(roman("|"));
            }
            line.push(bold(s));
        }
        if a.get_action().takes_values() {
            line.push(roman(" "));
            line.push(italic(value_name(a)));
        }
        if !required {
            line.push(roman("]"));
        }
    }
    for p in cmd.get_positionals().filter(|p| !p.is_hide_set()) {
        let many = p.get_num_args().is_some_and(|n| n.max_values() > 1);
        let dots = if many { "..." } else { "" };
        line.push(roman(" "));
        if p.is_required_set() {
            line.extend([italic(value_name(p)), roman(dots)]);
        } else {
            line.extend([roman("["), italic(value_name(p)), roman("]"), roman(dots)]);
        }
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        line.extend([roman(" "), italic("COMMAND"), roman(" ...")]);
    }
    r.text(line);
    r
}

fn entry(r: &mut Roff, head: Vec<Inline>, body: &str) {
    r.control("TP", []);
    r.text(head);
    r.text([roman(body)]);
}

fn var_entries(r: &mut Roff, vars: &[Var]) {
    for v in vars {
        entry(r, vec![bold(v.name)], v.what);
    }
}

fn environment(r: &mut Roff, cmd: &Command, prog: Program, sub: Option<&str>) {
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    r.control("SH", ["ENVIRONMENT"]);
    r.control("SS", [format!("Read by {name}").as_str()]);
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let (Some(var), Some(spelling)) = (a.get_env(), spellings(a).last()) {
            let what = format!("the default of {spelling} (see OPTIONS)");
            entry(r, vec![bold(var.to_string_lossy())], &what);
        }
    }
    var_entries(r, CLIENT_ENV);
    if prog == Program::Prun {
        r.control("SS", ["Given to every rank"]);
        r.text([roman(
            "Each rank starts with the environment prun was started in (but for GANG_* \
             variables, which are the agent's to set, and PMI_*), and these, set by its \
             node's agent. No SLURM_* variable is set: a library would take the job for \
             Slurm's.",
        )]);
        var_entries(r, RANK_ENV);
    }
    let script = match sub {
        None => prog == Program::Gangctl,
        Some(s) => s == "alloc" || s == "submit",
    };
    if script {
        r.control("SS", ["Given to a batch script and to alloc's command"]);
        r.text([roman(
            "So that prun in them starts steps of the allocation (a batch script also has a \
             rank's variables, see prun(1)):",
        )]);
        var_entries(r, SCRIPT_ENV);
    }
}

fn exit_statuses(r: &mut Roff, prog: Program, sub: Option<&str>) {
    r.control("SH", ["EXIT STATUS"]);
    let rows = match prog {
        Program::Prun => exit_status::prun(),
        Program::Gangctl => exit_status::gangctl(sub.and_then(|s| s.split(' ').next())),
    };
    for (code, when) in rows {
        entry(r, vec![bold(code)], when);
    }
}

/// The paragraphs of a command's `after_help`, each with its first line.
fn after_help(cmd: &Command) -> Vec<(String, Vec<String>)> {
    let Some(text) = cmd.get_after_long_help().or(cmd.get_after_help()) else {
        return Vec::new();
    };
    text.to_string()
        .split("\n\n")
        .filter_map(|para| {
            let mut lines = para.lines().map(str::to_string);
            Some((lines.next()?, lines.collect()))
        })
        .collect()
}

fn is_examples(head: &str) -> bool {
    head.starts_with("Example")
}

/// The command's `Examples:` (and `Example script:`), as they are; for gangctl's own page,
/// the first example of each command.
fn examples(r: &mut Roff, cmd: &Command, first_of_each: bool) {
    let mut blocks: Vec<(String, Vec<String>)> = after_help(cmd)
        .into_iter()
        .filter(|(head, _)| is_examples(head))
        .collect();
    if first_of_each {
        let firsts = cmd
            .get_subcommands()
            .filter_map(|s| {
                let (_, lines) = after_help(s).into_iter().find(|(h, _)| h == "Examples:")?;
                lines
                    .into_iter()
                    .find(|l| l.trim_start().starts_with("gangctl "))
            })
            .collect();
        blocks.push(("Examples:".into(), firsts));
    }
    if blocks.iter().all(|(_, lines)| lines.is_empty()) {
        return;
    }
    r.control("SH", ["EXAMPLES"]);
    for (head, lines) in blocks {
        if head != "Examples:" {
            r.text([roman(head)]);
        }
        r.control("RS", ["4"]);
        r.control("nf", []);
        for l in lines {
            r.text([roman(l.trim_start())]);
        }
        r.control("fi", []);
        r.control("RE", []);
    }
}

/// What else `after_help` says (but its exit statuses, which EXIT STATUS has).
fn notes(r: &mut Roff, cmd: &Command) {
    let rest: Vec<String> = after_help(cmd)
        .into_iter()
        .filter(|(head, _)| !is_examples(head) && !head.starts_with("Exit status"))
        .map(|(head, lines)| {
            std::iter::once(head)
                .chain(lines)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    if rest.is_empty() {
        return;
    }
    r.control("SH", ["NOTES"]);
    for para in rest {
        r.text([roman(para)]);
    }
}

fn see_also(r: &mut Roff, prog: Program, sub: Option<&str>) {
    r.control("SH", ["SEE ALSO"]);
    let text = match (prog, sub) {
        (Program::Prun, _) => "gangctl(1), gangctl-jobs(1), gangctl-submit(1), gangctl-alloc(1)",
        (Program::Gangctl, None) => "prun(1)",
        (Program::Gangctl, Some(_)) => "gangctl(1), prun(1)",
    };
    r.text([roman(text)]);
}
