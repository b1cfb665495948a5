//! `gangctl jobs` filters, as squeue/sacct take them: the jobs named (as ids: see
//! [`super::job_ref`] for the forms), `--user`, `--state` (labels or Slurm's short codes)
//! and `--since` (a duration ago or a UTC date and time).

use gang_proto::v1::{JobInfo, JobState};

use crate::args::parse::{DURATION_FORMS, parse_duration};

/// The jobs named on a command line, as ids (steps, tasks and `last` looked up:
/// [`super::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSel {
    /// Ids that must exist.
    pub single: Vec<u64>,
    /// Ranges of ids, whose missing ids are skipped.
    pub ranges: Vec<(u64, u64)>,
}

impl JobSel {
    pub fn contains(&self, id: u64) -> bool {
        self.single.contains(&id) || self.ranges.iter().any(|&(a, b)| (a..=b).contains(&id))
    }
}

/// What `--state` accepts, for its errors and `--help`.
pub const STATE_FORMS: &str = "queued (PD), starting (CF), running (R), completed (CD), \
failed (F), cancelled (CA), timeout (TO), or active (queued, starting and running)";

/// `--state S,...` parsed: one value to clap (a bare `Vec` would be taken as many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct States(pub Vec<JobState>);

/// [`parse_states`] as clap's value parser.
pub fn parse_state_set(s: &str) -> Result<States, String> {
    parse_states(s).map(States)
}

/// `--state S,...`: labels as gangctl prints them, or Slurm's short codes.
pub fn parse_states(s: &str) -> Result<Vec<JobState>, String> {
    let mut out = vec![];
    for word in s.split(',') {
        let w = word.trim().to_ascii_lowercase();
        let states: &[JobState] = match w.as_str() {
            "queued" | "pending" | "pd" => &[JobState::Queued],
            "starting" | "configuring" | "cf" => &[JobState::Starting],
            "running" | "r" => &[JobState::Running],
            "completed" | "cd" => &[JobState::Completed],
            "failed" | "f" => &[JobState::Failed],
            "cancelled" | "canceled" | "ca" => &[JobState::Cancelled],
            "timeout" | "to" => &[JobState::Timeout],
            "active" => &[JobState::Queued, JobState::Starting, JobState::Running],
            _ => {
                return Err(format!(
                    "unknown job state {word:?}: expected {STATE_FORMS}"
                ));
            }
        };
        for st in states {
            if !out.contains(st) {
                out.push(*st);
            }
        }
    }
    Ok(out)
}

/// `--since T`: an instant, as Unix nanoseconds, given as a duration ago (`1h`, `30m`,
/// `2-00`: see [`parse_duration`]) or a UTC time `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]`
/// (a space may replace the `T`), or RFC 3339 with `Z` or an offset (`+02:00`).
pub fn parse_since(s: &str, now_ns: i64) -> Result<i64, String> {
    let t = s.trim();
    if t.len() >= 10 && t.as_bytes()[4] == b'-' && t.as_bytes()[7] == b'-' {
        return parse_utc(t).ok_or_else(|| {
            format!(
                "expected a time as YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (UTC) or RFC 3339 \
                 (2024-05-01T12:00:00+02:00), got {s:?}"
            )
        });
    }
    let secs = parse_duration(t).map_err(|_| {
        format!(
            "expected a time (YYYY-MM-DD[THH:MM[:SS]], UTC, or RFC 3339) or a duration ago \
             ({DURATION_FORMS}), got {s:?}"
        )
    })?;
    let ago = i64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .ok_or_else(|| format!("{s:?} is further back than anything here"))?;
    Ok(now_ns.saturating_sub(ago))
}

/// `YYYY-MM-DD[(T| )HH:MM[:SS]][Z|±HH:MM]` -> Unix nanoseconds.
fn parse_utc(t: &str) -> Option<i64> {
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, rest) = t.split_at(10);
    let y = num(&date[..4])?;
    let m = num(&date[5..7])?;
    let d = num(&date[8..10])?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut secs = days_from_civil(y, m, d) * 86400;
    // Beyond 2262 nanoseconds overflow: the far future stays the far future.
    if rest.is_empty() {
        return Some(secs.saturating_mul(1_000_000_000));
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    // The offset: Z, or +HH:MM / -HH:MM after the clock.
    let (clock, offset) = if let Some(c) = rest.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else if rest.len() > 6 && matches!(rest.as_bytes()[rest.len() - 6], b'+' | b'-') {
        let (c, o) = rest.split_at(rest.len() - 6);
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let (oh, om) = o[1..].split_once(':')?;
        (c, sign * (num(oh)? * 3600 + num(om)? * 60))
    } else {
        (rest, 0)
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let (h, mi, s) = match parts.as_slice() {
        [h, m] => (num(h)?, num(m)?, 0),
        [h, m, s] => (num(h)?, num(m)?, num(s.split('.').next()?)?),
        _ => return None,
    };
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    secs += h * 3600 + mi * 60 + s - offset;
    Some(secs.saturating_mul(1_000_000_000))
}

/// (year, month, day) -> days since 1970-01-01 (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The filters of one `gangctl jobs`, applied to what the master listed.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub sel: Option<JobSel>,
    /// A user name or uid.
    pub user: Option<String>,
    /// Submitted at or after this instant (Unix nanoseconds).
    pub since_ns: Option<i64>,
}

impl JobFilter {
    pub fn matches(&self, j: &JobInfo) -> bool {
        self.sel.as_ref().is_none_or(|s| s.contains(j.id))
            && self
                .user
                .as_deref()
                .is_none_or(|u| j.user == u || j.uid.to_string() == u)
            && self.since_ns.is_none_or(|t| j.submit_ns >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_hold_ids_and_ranges() {
        let sel = JobSel {
            single: vec![3, 9],
            ranges: vec![(5, 7)],
        };
        assert!(sel.contains(6) && sel.contains(9) && !sel.contains(4) && !sel.contains(8));
    }

    #[test]
    fn states() {
        assert_eq!(
            parse_states("running,PD,to").unwrap(),
            vec![JobState::Running, JobState::Queued, JobState::Timeout]
        );
        assert_eq!(parse_states("active").unwrap().len(), 3);
        let e = parse_states("runing").unwrap_err();
        assert!(
            e.starts_with("unknown job state \"runing\": expected queued (PD)"),
            "{e}"
        );
    }

    #[test]
    fn since() {
        let now = 1_700_000_000 * 1_000_000_000;
        assert_eq!(parse_since("1h", now), Ok(now - 3600 * 1_000_000_000));
        assert_eq!(
            parse_since("2023-11-14", now),
            Ok(1_699_920_000 * 1_000_000_000)
        );
        assert_eq!(
            parse_since("2023-11-14T22:13", now),
            Ok(1_699_999_980 * 1_000_000_000)
        );
        assert_eq!(
            parse_since("2023-11-14 22:13:20", now),
            Ok(1_700_000_000 * 1_000_000_000)
        );
        assert_eq!(
            parse_since("2023-11-14T23:13:20+01:00", now),
            Ok(1_700_000_000 * 1_000_000_000)
        );
        assert_eq!(
            parse_since("2023-11-14T22:13:20Z", now),
            Ok(1_700_000_000 * 1_000_000_000)
        );
        for bad in ["2023-13-01", "2023-11-14T25:00", "yesterday", "2023-11-14X"] {
            let e = parse_since(bad, now).unwrap_err();
            assert!(e.starts_with("expected a time"), "{bad}: {e}");
        }
    }
}
