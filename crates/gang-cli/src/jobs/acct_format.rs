//! `gangctl acct --format`: the columns, by sacct's names, each with sacct's `%N` width
//! if given (`State%20`, `JobName%-10`).

/// A column of `gangctl acct`: its sacct name, and how it is read from a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    JobId,
    JobName,
    User,
    State,
    ExitCode,
    Elapsed,
    Run,
    TimeLimit,
    Submit,
    Start,
    End,
    NNodes,
    NodeList,
    Shape,
    Reason,
    Array,
    Dependency,
    UserCpu,
    SystemCpu,
    TotalCpu,
    MaxRss,
    CpuTime,
    MaxRssNode,
}

/// Every column, by the name `--format` takes (sacct's where sacct has one).
pub const COLUMNS: &[(&str, Column, &str)] = &[
    (
        "jobid",
        Column::JobId,
        "the job id; a step: ALLOCATION.STEP (12.0); an array task: ARRAY_TASK (17_3)",
    ),
    ("jobname", Column::JobName, "its name"),
    ("user", Column::User, "who submitted it"),
    (
        "state",
        Column::State,
        "queued, running, completed, failed, cancelled, timeout",
    ),
    (
        "exitcode",
        Column::ExitCode,
        "the exit code (128+N: killed by signal N; 124: timeout)",
    ),
    (
        "elapsed",
        Column::Elapsed,
        "wall time from its start to its end (or now)",
    ),
    (
        "run",
        Column::Run,
        "time it was scheduled to run in its time slices",
    ),
    ("timelimit", Column::TimeLimit, "its time limit"),
    ("submit", Column::Submit, "when it was submitted (UTC)"),
    ("start", Column::Start, "when it started (UTC)"),
    ("end", Column::End, "when it ended (UTC)"),
    ("nnodes", Column::NNodes, "how many nodes it had"),
    (
        "nodelist",
        Column::NodeList,
        "its nodes, as X-RANGE,Y-RANGE (0-1,2-3)",
    ),
    ("shape", Column::Shape, "its shape, WxH"),
    (
        "reason",
        Column::Reason,
        "why it failed, was cancelled, or waits",
    ),
    (
        "array",
        Column::Array,
        "ARRAY_TASK for a task of a job array",
    ),
    ("dependency", Column::Dependency, "what it waited for"),
    (
        "usercpu",
        Column::UserCpu,
        "CPU time in user mode, all its ranks' processes",
    ),
    (
        "systemcpu",
        Column::SystemCpu,
        "CPU time in the kernel, all its ranks' processes",
    ),
    ("totalcpu", Column::TotalCpu, "usercpu + systemcpu"),
    (
        "maxrss",
        Column::MaxRss,
        "the largest memory high-water mark of a rank",
    ),
    (
        "maxrssnode",
        Column::MaxRssNode,
        "the node (X,Y) of the rank of maxrss",
    ),
    (
        "cputime",
        Column::CpuTime,
        "elapsed x its nodes (a rank each), as sacct's elapsed x CPUs",
    ),
];

/// sacct's default set, in our terms.
pub const DEFAULT_FORMAT: &str =
    "jobid,jobname,user,state,exitcode,elapsed,run,totalcpu,maxrss,nnodes,nodelist";

impl Column {
    pub(super) fn name(self) -> &'static str {
        COLUMNS
            .iter()
            .find(|c| c.1 == self)
            .map(|c| c.0)
            .unwrap_or("?")
    }

    pub(super) fn header(self) -> String {
        self.name().to_ascii_uppercase()
    }
}

/// A column asked for, with sacct's width if given (`State%20`: 20 characters, right
/// justified; `JobName%-10`: left justified; longer values end in `+`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub column: Column,
    pub width: Option<i32>,
}

/// The widest `%N`: a typo such as `%2000` would print pages of blanks.
const MAX_WIDTH: i32 = 1000;

/// `--format jobid,jobname,state%20,...` (case-insensitive, as sacct's `JobID,JobName`).
pub fn parse_format(s: &str) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let (name, width) = match word.split_once('%') {
            None => (word, None),
            Some((name, w)) => match w.parse::<i32>() {
                Ok(n) if n != 0 && n.abs() <= MAX_WIDTH => (name, Some(n)),
                _ => {
                    return Err(format!(
                        "bad width in {word:?}: expected %N or %-N, N from 1 to {MAX_WIDTH} \
                         (State%20: right justified, JobName%-10: left)"
                    ));
                }
            },
        };
        let w = name.to_ascii_lowercase();
        let Some((_, c, _)) = COLUMNS.iter().find(|(n, _, _)| *n == w) else {
            let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
            return Err(format!(
                "unknown column {name:?}: expected some of {}",
                names.join(", ")
            ));
        };
        out.push(Field { column: *c, width });
    }
    if out.is_empty() {
        return Err("--format names no column".into());
    }
    Ok(out)
}

/// `--format` parsed: one value to clap (a bare `Vec` would be taken as many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(pub Vec<Field>);

/// [`parse_format`] as clap's value parser.
pub fn parse_format_arg(s: &str) -> Result<Format, String> {
    parse_format(s).map(Format)
}

/// A cell in sacct's `%N` width: cut to |N| characters (the last a `+` when cut; a
/// header is cut bare), right justified for N > 0, left for N < 0.
pub(super) fn fit(text: &str, width: i32, header: bool) -> String {
    let n = width.unsigned_abs() as usize;
    let len = text.chars().count();
    let cut: String = if len > n {
        let keep = if header { n } else { n - 1 };
        let mut t: String = text.chars().take(keep).collect();
        if !header {
            t.push('+');
        }
        t
    } else {
        text.to_string()
    };
    if width > 0 {
        format!("{cut:>n$}")
    } else {
        format!("{cut:<n$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_sacct_names_in_any_case() {
        let cols: Vec<Column> = parse_format("JobID,Elapsed,NodeList,CPUTime,MaxRSSNode")
            .unwrap()
            .iter()
            .map(|f| f.column)
            .collect();
        assert_eq!(
            cols,
            [
                Column::JobId,
                Column::Elapsed,
                Column::NodeList,
                Column::CpuTime,
                Column::MaxRssNode
            ]
        );
        let e = parse_format("jobid,maxvmsize").unwrap_err();
        assert!(e.contains("unknown column \"maxvmsize\""), "{e}");
        assert!(parse_format(DEFAULT_FORMAT).is_ok());
        let f = parse_format("State%20,JobName%-10").unwrap();
        assert_eq!((f[0].width, f[1].width), (Some(20), Some(-10)));
        for bad in ["state%", "state%0", "state%x", "state%2000", "%5"] {
            assert!(parse_format(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cells_are_cut_and_justified_as_sacct_does() {
        assert_eq!(fit("abc", 2, true), "ab");
        assert_eq!(fit("abcdef", 4, false), "abc+");
        assert_eq!(fit("abc", 5, false), "  abc");
        assert_eq!(fit("abc", -5, false), "abc  ");
    }
}
