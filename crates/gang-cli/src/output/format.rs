//! Pure formatting helpers: durations, times, tables, shell words, and the few facts of
//! a job every view shows (its shape and name). Strings in, strings out; nothing here knows
//! about output modes or views.

use gang_proto::v1::{JobInfo, Submesh};

/// The resolved shape `WxH`, or the requested one while unresolved.
pub fn job_shape(j: &JobInfo) -> String {
    if j.w > 0 && j.h > 0 {
        format!("{}x{}", j.w, j.h)
    } else {
        j.spec.as_ref().map(|s| s.shape.clone()).unwrap_or_default()
    }
}

/// The display name: the given name, else `argv[0]`.
pub fn job_name(j: &JobInfo) -> String {
    let Some(spec) = &j.spec else {
        return String::new();
    };
    if !spec.name.is_empty() {
        spec.name.clone()
    } else {
        spec.argv.first().cloned().unwrap_or_default()
    }
}

/// `55005184 bytes of rank 0's stdout, 12 bytes of rank 3's stderr`.
pub fn fmt_output_lost(lost: &[gang_proto::v1::OutputLoss]) -> String {
    lost.iter()
        .map(|l| {
            let stream = match l.stream() {
                gang_proto::v1::Stream::Stderr => "stderr",
                _ => "stdout",
            };
            format!("{} bytes of rank {}'s {stream}", l.bytes, l.rank)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `WxH@(X,Y)`.
pub fn fmt_submesh(s: &Submesh) -> String {
    format!("{}x{}@({},{})", s.w, s.h, s.x, s.y)
}

pub(super) fn fmt_list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub(super) fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// Columns padded to their widest cell, two spaces apart; no trailing blanks.
/// A string users wrote, safe to print on someone's terminal: control characters (ESC,
/// NUL, newlines) shown escaped, not sent to the terminal. The master refuses them in new
/// names; rows written before, arguments and reasons may still hold them.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        std::borrow::Cow::Owned(s.chars().flat_map(char::escape_debug).collect())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.into_iter().map(|c| printable(&c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i] - cell.chars().count();
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{:<width$} {}\n", format!("{k}:"), printable(v)))
        .collect()
}

/// Arguments joined for a shell: plain words as they are, others single-quoted.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c));
            if plain {
                a.clone()
            } else if a.chars().any(char::is_control) {
                // Bash's $'...' quoting: control characters escaped, not sent raw.
                let escaped: String = a
                    .chars()
                    .map(|c| match c {
                        '\'' | '\\' => format!("\\{c}"),
                        c if c.is_control() && c.is_ascii() => format!("\\x{:02x}", c as u32),
                        c if c.is_control() => format!("\\u{:04x}", c as u32),
                        c => c.to_string(),
                    })
                    .collect();
                format!("$'{escaped}'")
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Nanoseconds for people, to 3 significant digits: `850ns`, `12.5µs`, `+40µs`, `1.25ms`,
/// `-2s`. `signed` puts `+` before positive values.
pub fn fmt_ns(ns: i64, signed: bool) -> String {
    let sign = if ns < 0 {
        "-"
    } else if signed {
        "+"
    } else {
        ""
    };
    format!("{sign}{}", fmt_abs_ns(ns.unsigned_abs()))
}

fn fmt_abs_ns(a: u64) -> String {
    if a < 1000 {
        return format!("{a}ns");
    }
    const UNITS: [(f64, &str); 3] = [(1e3, "µs"), (1e6, "ms"), (1e9, "s")];
    let mut i = if a < 1_000_000 {
        0
    } else if a < 1_000_000_000 {
        1
    } else {
        2
    };
    loop {
        let text = three_digits(a as f64 / UNITS[i].0);
        // 999.96µs rounds to "1000": say 1ms instead.
        if i + 1 < UNITS.len() && text.len() >= 4 && !text.contains('.') {
            i += 1;
            continue;
        }
        return format!("{text}{}", UNITS[i].1);
    }
}

/// `v` (at least 1) to 3 significant digits, without trailing zeros: 1.25, 40, 12.3, 850.
fn three_digits(v: f64) -> String {
    let decimals = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A duration for people: `fmt_ns` below a minute (`850ms`, `12.3s`), else `4m05s`,
/// `1h02m03s`; `0s` for nothing.
pub fn fmt_duration_ns(ns: i64) -> String {
    if ns <= 0 {
        return "0s".into();
    }
    if ns < 60_000_000_000 {
        return fmt_ns(ns, false);
    }
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h == 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{h}h{m:02}m{s:02}s")
    }
}

/// A job's run time (scheduled time in its slots), `-` before it started.
pub(super) fn fmt_job_run(j: &JobInfo) -> String {
    if j.run_ns == 0 && j.start_ns == 0 {
        "-".into()
    } else {
        fmt_duration_ns(j.run_ns)
    }
}

/// A time limit as Slurm prints one (`D-HH:MM:SS`, `HH:MM:SS`, `MM:SS`); `-` for none.
pub fn fmt_limit(secs: u64) -> String {
    if secs == 0 {
        return "-".into();
    }
    let (d, h, m, s) = (
        secs / 86400,
        secs % 86400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match (d, h) {
        (0, 0) => format!("{m}:{s:02}"),
        (0, _) => format!("{h}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// A Unix time in nanoseconds as `YYYY-MM-DD HH:MM:SS UTC`; `-` for 0.
pub fn fmt_time_ns(ns: i64) -> String {
    if ns <= 0 {
        return "-".into();
    }
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 -> (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// What a rank waits for: "rank 3, tag 7", "any source, any tag".
fn fmt_wait(source: i32, tag: i32) -> String {
    let from = if source < 0 {
        "any source".to_string()
    } else {
        format!("rank {source}")
    };
    let tag = if tag < 0 {
        "any tag".to_string()
    } else {
        format!("tag {tag}")
    };
    format!("{from}, {tag}")
}

/// A deadlocked job's ranks, one line each, `prefix` first on every line.
pub fn deadlock_lines(j: &JobInfo, prefix: &str) -> String {
    let Some(d) = &j.deadlock else {
        return String::new();
    };
    let mut out = String::new();
    for w in &d.waits {
        out.push_str(&format!(
            "{prefix}rank {} on node ({},{}) waits for {} since {}\n",
            w.rank,
            w.x,
            w.y,
            fmt_wait(w.source, w.tag),
            fmt_time_ns(w.since_ns)
        ));
    }
    out
}

/// What prun prints when its job is found deadlocked.
pub fn deadlock_report(j: &JobInfo) -> String {
    let Some(d) = &j.deadlock else {
        return String::new();
    };
    let policy = match j.on_deadlock() {
        gang_proto::v1::DeadlockPolicy::Kill => "it will be killed (--on-deadlock kill)",
        _ => "it is left running (--on-deadlock report)",
    };
    format!(
        "prun: job {} DEADLOCKED at {}: every rank is blocked in a receive and nothing is in flight ({} messages delivered); {policy}\n{}",
        j.id,
        fmt_time_ns(d.detected_ns),
        d.messages,
        deadlock_lines(j, "prun:   ")
    )
}

/// A job's command as `gangctl job` shows it: an allocation's batch script by its name
/// and size (its text is the job's command line), an allocation without one as such.
pub fn command_text(spec: &gang_proto::v1::JobSpec) -> String {
    let at = spec.script_at as usize;
    if spec.allocate && at > 0 && at <= spec.argv.len() {
        // Its text stays with the job (and on its node, for its user alone).
        let args = &spec.argv[at..];
        return format!(
            "batch script {}, run by {}{}",
            printable(&spec.name),
            shell_join(&spec.argv[..at]),
            if args.is_empty() {
                String::new()
            } else {
                format!(" with {}", shell_join(args))
            }
        );
    }
    match (spec.allocate, spec.argv.as_slice()) {
        (true, []) => "- (an allocation for a command: gangctl alloc)".into(),
        (true, argv) => match argv.iter().position(|a| a == "-c") {
            Some(c) if argv.len() > c + 2 => format!(
                "batch script {} ({} lines, run by {}){}",
                argv[c + 2],
                argv[c + 1].lines().count(),
                argv[..c].join(" "),
                if argv.len() > c + 3 {
                    format!(" with {}", shell_join(&argv[c + 3..]))
                } else {
                    String::new()
                }
            ),
            _ => dash(&shell_join(argv)),
        },
        (false, argv) => dash(&shell_join(argv)),
    }
}

/// How many ranks a job runs: one per node, but an allocation's (its batch script, or
/// none).
pub fn rank_count(j: &gang_proto::v1::JobInfo) -> u32 {
    match &j.spec {
        Some(s) if s.allocate => u32::from(!s.argv.is_empty()),
        _ => j.w * j.h,
    }
}

/// How a job is named, as Slurm names it: `12.0` for step 0 of allocation 12, `17_3` for
/// task index 3 of array 17, else its id.
pub fn job_label(j: &gang_proto::v1::JobInfo) -> String {
    match (j.step, j.array_task_id) {
        (Some(s), _) if j.allocation_id != 0 => format!("{}.{s}", j.allocation_id),
        (_, Some(t)) if j.array_job_id != 0 => format!("{}_{t}", j.array_job_id),
        _ => j.id.to_string(),
    }
}

/// The job a step or a task belongs to: its allocation, or its array (for an array's
/// first task, its own id).
pub fn job_parent(j: &gang_proto::v1::JobInfo) -> Option<u64> {
    match (j.allocation_id, j.array_job_id) {
        (0, 0) => None,
        (0, a) => Some(a),
        (a, _) => Some(a),
    }
}

/// Task indices (ascending) for people, runs as ranges: `1-20`, `1,3,5-7`.
pub fn fmt_indices(indices: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j].wrapping_add(1) {
            j += 1;
        }
        parts.push(if j == i {
            indices[i].to_string()
        } else {
            format!("{}-{}", indices[i], indices[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_users_wrote_reaches_terminals_escaped() {
        assert_eq!(printable("plain name"), "plain name");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        let t = table(&["NAME"], vec![vec!["x\u{1b}]0;pwned\u{7}".into()]]);
        assert!(!t.contains('\u{1b}') && !t.contains('\u{7}'), "{t:?}");
        assert_eq!(shell_join(&["a\u{1b}'b".into()]), "$'a\\x1b\\'b'");
    }

    #[test]
    fn jobs_are_named_as_slurm_names_them() {
        use gang_proto::v1::JobInfo;
        let step = JobInfo {
            id: 5,
            allocation_id: 2,
            step: Some(1),
            ..Default::default()
        };
        let task = JobInfo {
            id: 26,
            array_job_id: 17,
            array_task_id: Some(10),
            ..Default::default()
        };
        let plain = JobInfo {
            id: 9,
            ..Default::default()
        };
        assert_eq!(
            [job_label(&step), job_label(&task), job_label(&plain)],
            ["2.1", "17_10", "9"]
        );
        assert_eq!(
            [job_parent(&step), job_parent(&task), job_parent(&plain)],
            [Some(2), Some(17), None]
        );
        assert_eq!(fmt_indices(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
        assert_eq!(fmt_indices(&[4]), "4");
        assert_eq!(fmt_indices(&[]), "");
        assert_eq!(
            fmt_indices(&[u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(0, false), "0ns");
        assert_eq!(fmt_ns(850, false), "850ns");
        assert_eq!(fmt_ns(999, true), "+999ns");
        assert_eq!(fmt_ns(1_000, false), "1µs");
        assert_eq!(fmt_ns(12_500, true), "+12.5µs");
        assert_eq!(fmt_ns(12_340, true), "+12.3µs");
        assert_eq!(fmt_ns(40_000, false), "40µs");
        assert_eq!(fmt_ns(123_456, false), "123µs");
        assert_eq!(
            fmt_ns(999_999, false),
            "1ms",
            "rounds up into the next unit"
        );
        assert_eq!(fmt_ns(1_250_000, false), "1.25ms");
        assert_eq!(fmt_ns(-1_500_000, true), "-1.5ms");
        assert_eq!(fmt_ns(100_000_000, false), "100ms");
        assert_eq!(fmt_ns(999_996_000, false), "1s");
        assert_eq!(fmt_ns(-2_000_000_000, true), "-2s");
        assert_eq!(fmt_ns(12_345_000_000, false), "12.3s");
        assert_eq!(fmt_ns(1_234_000_000_000, false), "1234s");
        assert_eq!(fmt_ns(i64::MIN, true), "-9223372037s");
        assert_eq!(fmt_duration_ns(0), "0s");
        assert_eq!(fmt_duration_ns(-5), "0s");
        assert_eq!(fmt_duration_ns(850_000_000), "850ms");
        assert_eq!(fmt_duration_ns(59_990_000_000), "60s");
        assert_eq!(fmt_duration_ns(60_000_000_000), "1m00s");
        assert_eq!(fmt_duration_ns(245_000_000_000), "4m05s");
        assert_eq!(fmt_duration_ns(3_723_900_000_000), "1h02m03s");
        assert_eq!(fmt_time_ns(0), "-");
        assert_eq!(fmt_time_ns(1), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            fmt_time_ns(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(
            shell_join(&["a".into(), "".into(), "it's".into()]),
            "a '' 'it'\\''s'"
        );
    }
}
