//! The EXIT STATUS sections: what each exit code of prun and gangctl means, one table per
//! program (and the subcommands that exit otherwise), the numbers taken from the code that
//! returns them where it names them.

use crate::prun::ends::TIMEOUT_EXIT;

/// One row: the status, and when it is returned.
pub type Row = (String, &'static str);

/// prun's exit statuses (see `prun/ends.rs` and docs/internals/cli.md).
pub fn prun() -> Vec<Row> {
    vec![
        (
            "0-255".into(),
            "the job's exit code: 0 if every rank exited 0, else that of the first rank that failed (128+N if a signal N killed it), named on stderr unless -q",
        ),
        (
            "1".into(),
            "the job could not run (the master unreachable or silent past --timeout, the request refused, a rank that could not start), some of its output was lost, or prun failed",
        ),
        ("2".into(), "a usage error: a bad option or value"),
        (
            TIMEOUT_EXIT.to_string(),
            "the job's time limit (-t) ended it (its state is timeout), as timeout(1)",
        ),
        (
            "130".into(),
            "Ctrl-C (SIGINT): the job was cancelled, as srun's 128+2",
        ),
        (
            "143".into(),
            "the job was cancelled (gangctl cancel, or prun got SIGTERM) and has no exit code of its own",
        ),
    ]
}

/// gangctl's exit statuses, with those of subcommand `sub` (None: the whole program).
pub fn gangctl(sub: Option<&str>) -> Vec<Row> {
    let mut rows: Vec<Row> = vec![
        ("0".into(), "success"),
        (
            "1".into(),
            "an error, printed as \"gangctl: ...\" (or one JSON object a line with --output json)",
        ),
        ("2".into(), "a usage error: a bad option or value"),
    ];
    let own: &[(&str, &'static str)] = match sub {
        None => &[(
            "other",
            "gangctl start, alloc and attach exit with their command's or job's status (see their pages)",
        )],
        Some("start") => &[
            ("CMD's", "with -- CMD: CMD's status (127 if it cannot run)"),
            (
                "128+N",
                "stopped by signal N: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP)",
            ),
        ],
        Some("alloc") => &[("CMD's", "the command's status; 127 if it cannot run")],
        Some("attach") => &[
            ("0-255", "the job's exit code, as prun's"),
            ("124", "the job's time limit ended it"),
            (
                "128+N",
                "detached by signal N (Ctrl-C: 130); the job runs on",
            ),
        ],
        Some("cancel") => &[(
            "1",
            "an error, or a job named could not be cancelled (it had ended, or is not yours): the others were",
        )],
        _ => &[],
    };
    for (code, when) in own {
        match rows.iter_mut().find(|(c, _)| c == code) {
            // A command that gives a general code more meanings says them all.
            Some(row) => row.1 = when,
            None => rows.push((code.to_string(), when)),
        }
    }
    rows
}
