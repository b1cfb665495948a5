//! Jobs as Slurm users name them: `12` (a job), `5-9` (ids), `12.1` (step 1 of allocation
//! 12, Slurm's JOBID.STEP), `17_10` (task index 10 of array 17), `17_[10-20]` or
//! `17_[1,3,5-7]` (tasks by index; `17_[6-20%4]` as squeue prints it is taken too, the
//! throttle ignored), and `last`; several comma-separated. Parsed here, without the
//! master; [`super::resolve`] turns them into job ids.

use std::fmt;
/// At most this many ids (or task indices) in one range: a typo such as `1-99999999` is
/// refused rather than turned into that many lookups.
pub const MAX_RANGE: u64 = 10_000;

/// What the forms are, for errors and `--help`.
pub const REF_FORMS: &str = "ID, FIRST-LAST, ID.STEP, ID_TASK, ID_[TASKS] or `last`, \
comma-separated (e.g. 3,5-9,12.1,17_[1-4])";

/// One job reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRef {
    /// `N`: a job, which must exist.
    Id(u64),
    /// `A-B`: ids; those that do not exist are skipped.
    Range(u64, u64),
    /// `N.S`: step S of allocation N.
    Step { alloc: u64, step: u32 },
    /// `N_T` (one index) or `N_[...]`: tasks of array N by index.
    Tasks {
        array: u64,
        indices: Vec<Indices>,
        bracketed: bool,
    },
}

/// Task indices in brackets: one (which must exist) or a range (missing ones skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indices {
    One(u32),
    Range(u32, u32),
}

/// What a command line named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// The caller's newest job that is not a step.
    Last,
    Refs(Vec<JobRef>),
}

impl Named {
    /// Whether only plain ids and ranges were named (nothing to look up at the master).
    pub fn is_plain(&self) -> bool {
        matches!(self, Named::Refs(r) if r.iter().all(|r| matches!(r, JobRef::Id(_) | JobRef::Range(..))))
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Id(n) => write!(f, "{n}"),
            JobRef::Range(a, b) => write!(f, "{a}-{b}"),
            JobRef::Step { alloc, step } => write!(f, "{alloc}.{step}"),
            JobRef::Tasks {
                array,
                indices,
                bracketed,
            } => {
                let list: Vec<String> = indices.iter().map(ToString::to_string).collect();
                if *bracketed {
                    write!(f, "{array}_[{}]", list.join(","))
                } else {
                    write!(f, "{array}_{}", list.join(","))
                }
            }
        }
    }
}

impl fmt::Display for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Indices::One(t) => write!(f, "{t}"),
            Indices::Range(a, b) => write!(f, "{a}-{b}"),
        }
    }
}

/// `IDS|RANGES|ID.STEP|ID_TASK|ID_[TASKS]|last` arguments, each a comma-separated list
/// (commas inside brackets belong to the brackets). `None`: nothing named.
pub fn parse_named(args: &[String]) -> Result<Option<Named>, String> {
    if args.is_empty() {
        return Ok(None);
    }
    if args.iter().any(|a| a.trim() == "last") {
        if args.len() > 1 {
            return Err("`last` stands alone: it names your newest job".into());
        }
        return Ok(Some(Named::Last));
    }
    let mut refs = Vec::new();
    for arg in args {
        for part in split_outside_brackets(arg)? {
            refs.push(parse_ref(part)?);
        }
    }
    Ok(Some(Named::Refs(refs)))
}

/// `a,b_[1,2],c` -> `a`, `b_[1,2]`, `c`.
fn split_outside_brackets(arg: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut start, mut open) = (Vec::new(), 0, false);
    for (i, c) in arg.char_indices() {
        match c {
            '[' if open => return Err(format!("brackets inside brackets in {arg:?}")),
            '[' => open = true,
            ']' if !open => return Err(format!("a `]` without its `[` in {arg:?}")),
            ']' => open = false,
            ',' if !open => {
                parts.push(&arg[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(format!(
            "a `[` without its `]` in {arg:?} (tasks go as 17_[1-4])"
        ));
    }
    parts.push(&arg[start..]);
    Ok(parts)
}

fn bad(part: &str) -> String {
    format!("expected job ids as {REF_FORMS}, got {part:?}")
}

fn num<T: std::str::FromStr>(s: &str, part: &str) -> Result<T, String> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(part));
    }
    s.parse().map_err(|_| bad(part))
}

/// `A-B` checked: forwards, and not too long.
fn range<T: Into<u64> + Copy + std::str::FromStr>(
    a: &str,
    b: &str,
    part: &str,
    what: &str,
) -> Result<(T, T), String> {
    let (x, y): (T, T) = (num(a, part)?, num(b, part)?);
    let (lo, hi) = (x.into(), y.into());
    if lo > hi {
        return Err(format!(
            "{what} range {part:?} runs backwards: write {}",
            part.replacen(
                &format!("{a}-{b}"),
                &format!("{}-{}", b.trim(), a.trim()),
                1
            )
        ));
    }
    if hi - lo >= MAX_RANGE {
        return Err(format!(
            "{what} range {part:?} names {} {what}s; the limit is {MAX_RANGE} per range",
            hi - lo + 1
        ));
    }
    Ok((x, y))
}

/// One reference, without commas (but inside brackets).
pub fn parse_ref(part: &str) -> Result<JobRef, String> {
    let p = part.trim();
    if let Some((array, tasks)) = p.split_once('_') {
        let array = num(array, part)?;
        let (inner, bracketed) = match tasks.strip_prefix('[') {
            Some(rest) => (rest.strip_suffix(']').ok_or_else(|| bad(part))?, true),
            None => (tasks, false),
        };
        // squeue's compact line ends with the array's throttle: taken as printed.
        let inner = match (bracketed, inner.rsplit_once('%')) {
            (true, Some((list, limit))) => {
                num::<u32>(limit, part)?;
                list
            }
            _ => inner,
        };
        let mut indices = Vec::new();
        for i in inner.split(',') {
            indices.push(match i.split_once('-') {
                None => Indices::One(num(i, part)?),
                Some((a, b)) => {
                    if !bracketed {
                        return Err(format!(
                            "task ranges go in brackets: write {array}_[{}]",
                            i.trim()
                        ));
                    }
                    let (a, b) = range(a, b, part, "task")?;
                    Indices::Range(a, b)
                }
            });
        }
        return Ok(JobRef::Tasks {
            array,
            indices,
            bracketed,
        });
    }
    if let Some((alloc, step)) = p.split_once('.') {
        return Ok(JobRef::Step {
            alloc: num(alloc, part)?,
            step: num(step, part)?,
        });
    }
    match p.split_once('-') {
        None => Ok(JobRef::Id(num(p, part)?)),
        Some((a, b)) => {
            let (a, b) = range::<u64>(a, b, part, "job")?;
            Ok(JobRef::Range(a, b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn refs(a: &[&str]) -> Vec<JobRef> {
        match parse_named(&args(a)).unwrap().unwrap() {
            Named::Refs(r) => r,
            Named::Last => panic!("last"),
        }
    }

    #[test]
    fn every_form_and_commas_inside_brackets() {
        use JobRef::*;
        assert_eq!(parse_named(&[]), Ok(None));
        assert_eq!(parse_named(&args(&["last"])), Ok(Some(Named::Last)));
        assert_eq!(
            refs(&["3,5-7", "12.1,17_10", "17_[1,3,5-7]"]),
            [
                Id(3),
                Range(5, 7),
                Step { alloc: 12, step: 1 },
                Tasks {
                    array: 17,
                    indices: vec![Indices::One(10)],
                    bracketed: false
                },
                Tasks {
                    array: 17,
                    indices: vec![Indices::One(1), Indices::One(3), Indices::Range(5, 7)],
                    bracketed: true
                },
            ]
        );
        // As squeue prints a compact line: the throttle is not an index.
        assert_eq!(refs(&["5_[6-20%4]"]), refs(&["5_[6-20]"]));
        assert!(Named::Refs(refs(&["3,5-9"])).is_plain());
        assert!(!Named::Refs(refs(&["3,5.1"])).is_plain());
    }

    #[test]
    fn bad_forms_name_what_is_accepted() {
        for bad in [
            "x",
            "3-",
            "-3",
            "1,,2",
            "3-1",
            "1-20000",
            "2.",
            ".1",
            "2.x",
            "17_",
            "_3",
            "17_[",
            "17_[1-3",
            "17_1-3]",
            "17_[[1]]",
            "17_[1-3]x",
            "17_[a]",
            "17_[%4]",
            "2.1.1",
            "+3",
        ] {
            assert!(parse_named(&args(&[bad])).is_err(), "{bad}");
        }
        assert!(parse_named(&args(&["last", "3"])).is_err());
        let e = parse_named(&args(&["7-2"])).unwrap_err();
        assert!(e.contains("write 2-7"), "{e}");
        let e = parse_named(&args(&["17_[9-4]"])).unwrap_err();
        assert!(e.contains("write 17_[4-9]"), "{e}");
        let e = parse_named(&args(&["17_1-3"])).unwrap_err();
        assert!(e.contains("write 17_[1-3]"), "{e}");
        let e = parse_named(&args(&["x"])).unwrap_err();
        assert!(
            e.starts_with("expected job ids as ID, FIRST-LAST, ID.STEP"),
            "{e}"
        );
    }

    fn a_ref() -> impl Strategy<Value = JobRef> {
        let indices = prop_oneof![
            (0u32..5000).prop_map(Indices::One),
            (0u32..5000, 0u32..100).prop_map(|(a, n)| Indices::Range(a, a + n)),
        ];
        prop_oneof![
            (0u64..1 << 40).prop_map(JobRef::Id),
            (0u64..1 << 40, 0u64..MAX_RANGE).prop_map(|(a, n)| JobRef::Range(a, a + n)),
            (0u64..1 << 40, any::<u32>()).prop_map(|(alloc, step)| JobRef::Step { alloc, step }),
            (0u64..1 << 40, 0u32..5000).prop_map(|(array, t)| JobRef::Tasks {
                array,
                indices: vec![Indices::One(t)],
                bracketed: false
            }),
            (0u64..1 << 40, prop::collection::vec(indices, 1..5)).prop_map(|(array, indices)| {
                JobRef::Tasks {
                    array,
                    indices,
                    bracketed: true,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn what_is_printed_parses_back(rs in prop::collection::vec(a_ref(), 1..6)) {
            let text = rs.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
            prop_assert_eq!(parse_named(std::slice::from_ref(&text)), Ok(Some(Named::Refs(rs))), "{}", text);
        }

        #[test]
        fn anything_typed_is_parsed_or_refused_without_a_panic(s in "[0-9_.,\\[\\]%-]{0,16}") {
            let _ = parse_named(&[s]);
        }
    }
}
