//! `gangctl submit job.sh`, as sbatch: the script's `#GANG` directives and the command
//! line make an allocation, and the script runs once, as its one rank, on its first node.
//! `prun` in it starts steps on the allocation's nodes.
//!
//! Directives are `#GANG` comment lines before the first command (after an optional `#!`
//! line), with the options of the command line; an option given on both is the command
//! line's. The script travels with the job but apart from its command line
//! (`JobSpec.script`), where any user of the node would read it: the agent writes it into
//! the rank's own directory, readable by its user alone, and runs `INTERPRETER PATH ARGS`
//! (as Slurm's spooled `slurm_script`); its interpreter is the one its `#!` line names,
//! else `/bin/sh`.

mod srun_lines;

use std::path::{Path, PathBuf};

use clap::{Args, Parser};
use gang_core::GangMode;
use gang_proto::v1::{JobSpec, SubmitRequest};

use crate::args::gang_mode;
use crate::args::parse::parse_duration;
use crate::args::prun::{parse_array, parse_dependency, parse_pattern};
use crate::connect::{self, CliError};
use crate::output::OutputMode;

/// The largest script (it counts with the command line against the master's
/// `max_argv_bytes`, as when it was one argument of its interpreter: 128 KiB at most).
pub const MAX_SCRIPT_BYTES: usize = (128 << 10) - 1;

/// Where a batch script's output goes unless -o says otherwise (sbatch's slurm-%j.out).
pub const DEFAULT_OUTPUT: &str = "gang-%j.out";

/// What an allocation asks: `gangctl alloc`'s options, and `gangctl submit`'s (on its
/// command line or in `#GANG` lines).
#[derive(Debug, Clone, Default, Args)]
pub struct AllocOptions {
    /// Nodes: WxH (e.g. 4x2) or a node count (e.g. 8), as prun's [submit: 1, as sbatch].
    #[arg(short = 'N', long = "nodes", value_name = "SHAPE", action = clap::ArgAction::Append)]
    pub nodes: Vec<String>,

    /// Tasks, as Slurm's -n: one rank runs on each node, so the same as -N; given with
    /// -N (-N 4 -n 4), the two must agree.
    #[arg(short = 'n', long = "ntasks", value_name = "SHAPE", action = clap::ArgAction::Append)]
    pub ntasks: Vec<String>,

    /// How long the allocation may run (its steps with it), as prun's --time-limit.
    #[arg(short = 't', long, alias = "time", value_name = "DURATION", value_parser = parse_duration)]
    pub time_limit: Option<u64>,

    /// Name shown by `gangctl jobs`.
    #[arg(short = 'J', long, alias = "job-name")]
    pub name: Option<String>,

    /// Start only after other jobs (as prun's --dependency).
    #[arg(short = 'd', long, value_name = "TYPE:ID,...", value_parser = parse_dependency)]
    pub dependency: Option<String>,

    /// Submit it held: it waits, queued, until `gangctl release ID`.
    #[arg(short = 'H', long)]
    pub hold: bool,

    /// How the allocation (and so every step in it) is switched out of its time slices
    /// [default: the cluster's].
    #[arg(long, value_name = "MODE", value_parser = gang_mode::parser())]
    pub gang: Option<GangMode>,

    /// The directory the script (or command) starts in [default: the current one].
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<PathBuf>,
}

impl AllocOptions {
    /// What -N and -n ask, as one request (`None`: neither was given).
    pub fn node_request(&self) -> Result<Option<String>, String> {
        crate::args::nodes::one_request(&self.nodes, &self.ntasks)
    }

    /// These options, each taken from `over` where it sets it (-N and -n together: the
    /// command line's if it gives either).
    fn under(self, over: AllocOptions) -> AllocOptions {
        let over_nodes = !(over.nodes.is_empty() && over.ntasks.is_empty());
        let (nodes, ntasks) = match over_nodes {
            true => (over.nodes, over.ntasks),
            false => (self.nodes, self.ntasks),
        };
        AllocOptions {
            nodes,
            ntasks,
            time_limit: over.time_limit.or(self.time_limit),
            name: over.name.or(self.name),
            dependency: over.dependency.or(self.dependency),
            hold: over.hold || self.hold,
            gang: over.gang.or(self.gang),
            chdir: over.chdir.or(self.chdir),
        }
    }
}

/// `gangctl submit`'s options besides the allocation's.
#[derive(Debug, Clone, Default, Args)]
pub struct BatchOptions {
    #[command(flatten)]
    pub alloc: AllocOptions,

    /// The script's stdout (and stderr, unless -e), as prun's -o: %j the job id, %A/%a an
    /// array's id and task [default: gang-%j.out in the directory it starts in]. (Long
    /// name --stdout: gangctl's --output is its own; `#GANG --output` works.)
    #[arg(short = 'o', long = "stdout", value_name = "PATTERN", value_parser = parse_pattern)]
    pub stdout: Option<String>,

    /// The script's stderr (`#GANG --error` works too).
    #[arg(short = 'e', long = "stderr", value_name = "PATTERN", value_parser = parse_pattern)]
    pub stderr: Option<String>,

    /// Submit one allocation per task index, as prun's --array.
    #[arg(long, value_name = "INDEXES", value_parser = parse_array)]
    pub array: Option<String>,
}

impl BatchOptions {
    fn under(self, over: BatchOptions) -> BatchOptions {
        BatchOptions {
            alloc: self.alloc.under(over.alloc),
            stdout: over.stdout.or(self.stdout),
            stderr: over.stderr.or(self.stderr),
            array: over.array.or(self.array),
        }
    }
}

/// The directives' parser: the same options as the command line's.
#[derive(Debug, Parser)]
#[command(name = "#GANG", no_binary_name = true, disable_help_flag = true)]
struct Directives {
    #[command(flatten)]
    opts: BatchOptions,
}

/// A batch script read: its options from `#GANG` lines, and how it is run.
#[derive(Debug, Clone)]
pub struct Script {
    pub directives: BatchOptions,
    /// Its interpreter and the arguments before `-c`.
    pub interpreter: Vec<String>,
    pub text: String,
}

/// Interpreters known to run `-c TEXT NAME ARGS...` as a script file would run.
const TAKES_C: [&str; 6] = ["sh", "bash", "dash", "zsh", "ksh", "mksh"];

/// Read a script's `#!` line and `#GANG` directives; refuses what could not run as it
/// reads, naming the line.
pub fn parse_script(text: &str) -> Result<Script, String> {
    if text.len() > MAX_SCRIPT_BYTES {
        return Err(format!(
            "the script is {} bytes; the limit is {MAX_SCRIPT_BYTES} (it is passed as one \
             argument); run a longer program from a short script",
            text.len()
        ));
    }
    if text.contains('\0') {
        return Err("the script contains a NUL byte".into());
    }
    let mut lines = text.lines().enumerate().peekable();
    let mut interpreter = vec!["/bin/sh".to_string()];
    if let Some((_, first)) = lines.peek()
        && let Some(rest) = first.strip_prefix("#!")
    {
        let words: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        let name = |w: &String| {
            Path::new(w)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        };
        // `#!/usr/bin/env bash` names the interpreter in its first argument.
        let program = match words.first().and_then(name).as_deref() {
            Some("env") => words.get(1).cloned(),
            _ => words.first().and_then(name),
        };
        match program {
            Some(p) if TAKES_C.contains(&p.as_str()) => interpreter = words,
            Some(p) => {
                return Err(format!(
                    "line 1: {p} scripts are not supported: the script runs as `INTERPRETER -c \
                     SCRIPT`, which sh, bash, dash, zsh and ksh take; run a {p} program from a \
                     shell script"
                ));
            }
            None => return Err("line 1: `#!` names no interpreter".into()),
        }
        lines.next();
    }
    let mut words = Vec::new();
    for (i, line) in lines {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        let Some(rest) = t.strip_prefix("#GANG") else {
            continue;
        };
        if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let split = shlex::split(rest)
            .ok_or_else(|| format!("line {}: unbalanced quotes in {t:?}", i + 1))?;
        // sbatch's spellings, which gangctl's command line gives to its own --output.
        words.extend(split.into_iter().map(|w| match w.split_once('=') {
            Some(("--output", v)) => format!("--stdout={v}"),
            Some(("--error", v)) => format!("--stderr={v}"),
            _ if w == "--output" => "--stdout".into(),
            _ if w == "--error" => "--stderr".into(),
            _ => w,
        }));
    }
    let directives = Directives::try_parse_from(&words)
        .map_err(|e| format!("#GANG directives: {}", first_line(&e.to_string())))?
        .opts;
    directives
        .alloc
        .node_request()
        .map_err(|e| format!("#GANG directives: {e}"))?;
    Ok(Script {
        directives,
        interpreter,
        text: text.to_string(),
    })
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_string()
}

/// The job that runs `script` (named `name`, with `args`) with the command line's options
/// over its directives.
pub fn batch_spec(
    script: &Script,
    name: &str,
    args: &[String],
    cli: BatchOptions,
    cwd: String,
    env: std::collections::HashMap<String, String>,
) -> Result<JobSpec, String> {
    let opts = script.directives.clone().under(cli);
    // sbatch's default: one node.
    let nodes = opts.alloc.node_request()?.unwrap_or_else(|| "1".into());
    let mut argv = script.interpreter.clone();
    let script_at = argv.len() as u32;
    argv.extend(args.iter().cloned());
    Ok(JobSpec {
        shape: nodes,
        argv,
        script: script.text.clone(),
        script_at,
        cwd,
        env,
        time_limit_s: opts.alloc.time_limit.unwrap_or(0),
        name: opts.alloc.name.clone().unwrap_or_else(|| name.to_string()),
        gang: gang_mode::to_proto(opts.alloc.gang) as i32,
        output: opts.stdout.unwrap_or_else(|| DEFAULT_OUTPUT.to_string()),
        error: opts.stderr.unwrap_or_default(),
        dependency: opts.alloc.dependency.unwrap_or_default(),
        hold: opts.alloc.hold,
        array: opts.array.unwrap_or_default(),
        allocate: true,
        ..Default::default()
    })
}

/// Where a batch script comes from.
#[derive(Debug, Clone)]
pub enum Source {
    File(PathBuf),
    /// `--wrap CMD`: a one-line sh script.
    Wrap(String),
}

/// `gangctl submit`: prints `submitted batch job 12` (the id alone with --parsable).
pub async fn submit(
    master: &str,
    mode: OutputMode,
    source: Source,
    args: &[String],
    cli: BatchOptions,
    parsable: bool,
) -> Result<i32, CliError> {
    let (text, name) = match &source {
        Source::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::other(format!("cannot read {}: {e}", path.display())))?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "script".into());
            (text, name)
        }
        Source::Wrap(cmd) => (format!("#!/bin/sh\n{cmd}\n"), "wrap".to_string()),
    };
    let script = parse_script(&text).map_err(|e| match &source {
        Source::File(path) => CliError::other(format!("{}: {e}", path.display())),
        Source::Wrap(_) => CliError::other(format!("--wrap: {e}")),
    })?;
    let cwd = start_dir(
        cli.alloc
            .chdir
            .as_deref()
            .or(script.directives.alloc.chdir.as_deref()),
    )?;
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    // Lines as the user wrote them: --wrap's own, not the script made of it.
    let (shown, written) = match &source {
        Source::File(path) => (path.display().to_string(), text.as_str()),
        Source::Wrap(cmd) => ("--wrap".to_string(), cmd.as_str()),
    };
    let srun = srun_lines::installed(std::env::var_os("PATH").as_deref());
    for warning in srun_lines::warnings(&shown, written, srun.as_deref()) {
        eprintln!("gangctl: {warning}");
    }
    if text.lines().any(|l| l.starts_with("#SBATCH"))
        && !text.lines().any(|l| l.starts_with("#GANG"))
    {
        eprintln!(
            "gangctl: the script's #SBATCH lines are not read here: write them as #GANG lines"
        );
    }
    let spec = batch_spec(&script, &name, args, cli, cwd, env).map_err(CliError::other)?;
    let request = SubmitRequest {
        spec: Some(spec),
        client_token: connect::new_client_token()?,
        ..Default::default()
    };
    let answer = connect::submit_with_retries(master, request).await?;
    let job = answer.job.unwrap_or_default();
    match mode {
        OutputMode::Json => mode.print(&crate::output::job_view::JobView(&job)),
        OutputMode::Cli if parsable => println!("{}", job.id),
        OutputMode::Cli if answer.array_tasks > 1 => println!(
            "submitted batch array {} ({} tasks: jobs {}-{})",
            job.id,
            answer.array_tasks,
            job.id,
            job.id + u64::from(answer.array_tasks) - 1
        ),
        OutputMode::Cli => println!("submitted batch job {}", job.id),
    }
    Ok(0)
}

/// The absolute directory a job starts in: `dir` taken from the current one.
pub fn start_dir(dir: Option<&Path>) -> Result<String, CliError> {
    let here = std::env::current_dir()
        .map_err(|e| CliError::other(format!("cannot get the current directory: {e}")))?;
    let cwd = match dir {
        Some(d) => here.join(d),
        None => here,
    };
    cwd.to_str()
        .map(str::to_string)
        .ok_or_else(|| CliError::other(format!("the directory {} is not UTF-8", cwd.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_of(text: &str, cli: &[&str]) -> Result<JobSpec, String> {
        let script = parse_script(text)?;
        let cli = Directives::try_parse_from(cli)
            .map_err(|e| e.to_string())?
            .opts;
        batch_spec(
            &script,
            "job.sh",
            &["a".into()],
            cli,
            "/w".into(),
            Default::default(),
        )
    }

    #[test]
    fn directives_are_read_until_the_first_command_and_the_command_line_wins() {
        let text = "#!/bin/bash -e\n#GANG -n 2x2 -t 10m\n# a comment\n\n#GANG --job-name 'my job' --output out-%j.txt\nprun hostname\n#GANG -n 9x9\n";
        let s = spec_of(text, &[]).unwrap();
        assert_eq!(s.shape, "2x2");
        assert_eq!(s.time_limit_s, 600);
        assert_eq!(s.name, "my job");
        assert_eq!(s.output, "out-%j.txt");
        assert!(s.allocate);
        // The script apart from the command line (which any user of the node reads).
        assert_eq!(s.argv, ["/bin/bash", "-e", "a"]);
        assert_eq!((s.script.as_str(), s.script_at), (text, 2));
        let s = spec_of(text, &["-n", "4", "-t", "1h"]).unwrap();
        assert_eq!((s.shape.as_str(), s.time_limit_s), ("4", 3600));
        // No #! line: /bin/sh; no -o: gang-%j.out.
        let s = spec_of("#GANG -N 2\nprun true\n", &[]).unwrap();
        assert_eq!(s.argv[0], "/bin/sh");
        assert_eq!(s.output, DEFAULT_OUTPUT);
        let s = spec_of("#!/usr/bin/env bash\n#GANG -n 1\n", &[]).unwrap();
        assert_eq!(
            (&s.argv[..], s.script_at),
            (
                &["/usr/bin/env".to_string(), "bash".into(), "a".into()][..],
                2
            )
        );
    }

    #[test]
    fn one_node_by_default_and_n_with_big_n_as_slurm_users_type_them() {
        // sbatch's default: one node.
        assert_eq!(spec_of("prun true\n", &[]).unwrap().shape, "1");
        assert_eq!(spec_of("#GANG -N 4 -n 4\n", &[]).unwrap().shape, "4");
        assert_eq!(
            spec_of("#GANG -N 2\n#GANG -n 2x1\n", &[]).unwrap().shape,
            "2x1"
        );
        assert_eq!(
            spec_of("#GANG --nodes=2 --ntasks=2\n", &[]).unwrap().shape,
            "2"
        );
        // The command line's -N/-n, together, over the script's.
        let s = spec_of("#GANG -N 2 -n 2\n", &["-N", "4", "-n", "4"]).unwrap();
        assert_eq!(s.shape, "4");
        assert_eq!(
            spec_of("#GANG -N 2\n", &["-n", "2x2"]).unwrap().shape,
            "2x2"
        );
        let cli = Directives::try_parse_from(["-N", "2", "-n", "3"])
            .unwrap()
            .opts;
        assert!(
            cli.alloc
                .node_request()
                .unwrap_err()
                .contains("-n 3 asks 3 tasks")
        );
    }

    #[test]
    fn scripts_that_cannot_run_as_read_are_refused_naming_why() {
        let err = |t: &str| spec_of(t, &[]).unwrap_err();
        assert_eq!(
            err("#GANG -n 2\n#GANG --time-limt 5m\n"),
            "#GANG directives: unexpected argument '--time-limt' found"
        );
        assert!(err("#!/usr/bin/perl\n").starts_with("line 1: perl scripts are not supported"));
        // -N and -n that disagree, on one line or on two.
        assert!(
            err("#GANG -N 2\n#GANG -n 4\n")
                .starts_with("#GANG directives: -n 4 asks 4 tasks and -N 2 asks 2 nodes"),
            "{}",
            err("#GANG -N 2\n#GANG -n 4\n")
        );
        assert!(err("#GANG -n '2\n").contains("unbalanced quotes"));
        assert!(err(&"#".repeat(MAX_SCRIPT_BYTES + 1)).contains("the limit is 131071"));
        // `#GANGSTER` is a comment, not a directive.
        assert_eq!(
            spec_of("#GANGSTER -n 9\n#GANG -n 1\n", &[]).unwrap().shape,
            "1"
        );
    }
}
