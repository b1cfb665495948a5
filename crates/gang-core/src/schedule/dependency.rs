//! Job dependencies, as Slurm's `--dependency`: `after`, `afterany`, `afterok` and
//! `afternotok`, each on one or more jobs (`afterok:12:13`), comma-separated; all must hold.
//!
//! Pure: the caller says where each job it names is ([`Upstream`]) and gets a [`Verdict`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// At most this many jobs named by one job's dependencies.
pub const MAX_DEPS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    /// Once the job has started (or ended).
    After,
    /// Once it has ended, however.
    AfterAny,
    /// Once it has completed with exit 0.
    AfterOk,
    /// Once it has ended otherwise (failed, cancelled, timed out).
    AfterNotOk,
}

impl DepKind {
    fn word(self) -> &'static str {
        match self {
            DepKind::After => "after",
            DepKind::AfterAny => "afterany",
            DepKind::AfterOk => "afterok",
            DepKind::AfterNotOk => "afternotok",
        }
    }
}

/// One condition: `kind` on job `job`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dep {
    pub kind: DepKind,
    pub job: u64,
}

impl fmt::Display for Dep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.word(), self.job)
    }
}

/// The forms accepted, for errors and help.
pub const FORMS: &str =
    "TYPE:ID[:ID...][,TYPE:ID...] with TYPE one of after, afterany, afterok, afternotok";

/// `afterok:12:13,afterany:14`; empty: none.
pub fn parse(s: &str) -> Result<Vec<Dep>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<Dep> = Vec::new();
    for part in s.split(',') {
        let mut words = part.trim().split(':');
        let kind = match words.next().unwrap_or_default().trim() {
            "after" => DepKind::After,
            "afterany" => DepKind::AfterAny,
            "afterok" => DepKind::AfterOk,
            "afternotok" => DepKind::AfterNotOk,
            "singleton" | "aftercorr" | "afterburstbuffer" => {
                return Err(format!(
                    "dependency {part:?}: this type is Slurm's and not supported here; \
                     expected {FORMS}"
                ));
            }
            other => {
                return Err(format!(
                    "dependency {part:?}: unknown type {other:?}; expected {FORMS}"
                ));
            }
        };
        let mut any = false;
        for id in words {
            // Slurm's `afterok:12+60` (a delay) is not supported: refused, not ignored.
            let job: u64 = id.trim().parse().map_err(|_| {
                format!("dependency {part:?}: {id:?} is not a job id; expected {FORMS}")
            })?;
            any = true;
            let dep = Dep { kind, job };
            if !out.contains(&dep) {
                out.push(dep);
            }
        }
        if !any {
            return Err(format!(
                "dependency {part:?} names no job; expected {FORMS}"
            ));
        }
    }
    if out.len() > MAX_DEPS {
        return Err(format!(
            "{} dependencies; the limit is {MAX_DEPS}",
            out.len()
        ));
    }
    Ok(out)
}

/// Where a job named by a dependency is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// Not started yet.
    Waiting,
    /// Placed, running.
    Started,
    /// Ended: `ok` when it completed with exit 0.
    Ended { ok: bool },
}

/// What the dependencies of a job say now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// All hold: the job may be queued for nodes.
    Met,
    /// This one does not hold yet.
    Waiting(Dep),
    /// This one can never hold (the job it names ended the other way).
    Never(Dep, Upstream),
}

/// Evaluate `deps` given where each named job is (several states: an array's tasks).
pub fn evaluate(deps: &[Dep], mut upstream: impl FnMut(u64) -> Vec<Upstream>) -> Verdict {
    let mut waiting = None;
    for &d in deps {
        for u in upstream(d.job) {
            let holds = match (d.kind, u) {
                (DepKind::After, Upstream::Waiting) => Some(false),
                (DepKind::After, _) => Some(true),
                (_, Upstream::Waiting | Upstream::Started) => Some(false),
                (DepKind::AfterAny, Upstream::Ended { .. }) => Some(true),
                (DepKind::AfterOk, Upstream::Ended { ok }) => ok.then_some(true),
                (DepKind::AfterNotOk, Upstream::Ended { ok }) => (!ok).then_some(true),
            };
            match holds {
                None => return Verdict::Never(d, u),
                Some(false) if waiting.is_none() => waiting = Some(d),
                _ => {}
            }
        }
    }
    waiting.map_or(Verdict::Met, Verdict::Waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slurm_forms() {
        let d = parse("afterok:12:13,afterany:14, after:3").unwrap();
        assert_eq!(
            d.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["afterok:12", "afterok:13", "afterany:14", "after:3"]
        );
        assert_eq!(parse("").unwrap(), vec![]);
        assert!(parse("afterok").unwrap_err().contains("names no job"));
        assert!(parse("afterok:x").unwrap_err().contains("not a job id"));
        assert!(parse("afterok:3+60").unwrap_err().contains("not a job id"));
        assert!(
            parse("befor:3")
                .unwrap_err()
                .contains("unknown type \"befor\"")
        );
        assert!(parse("singleton").unwrap_err().contains("not supported"));
        let many = (0..101)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(":");
        assert!(
            parse(&format!("afterok:{many}"))
                .unwrap_err()
                .contains("limit is 100")
        );
    }

    #[test]
    fn verdicts() {
        use Upstream::*;
        let deps = parse("afterok:1,afternotok:2,after:3,afterany:4").unwrap();
        let at = |s: [Upstream; 4]| evaluate(&deps, |j| vec![s[j as usize - 1]]);
        let (ok, bad) = (Ended { ok: true }, Ended { ok: false });
        assert_eq!(at([ok, bad, Started, bad]), Verdict::Met);
        assert_eq!(at([ok, bad, Waiting, ok]), Verdict::Waiting(deps[2]));
        assert_eq!(at([Started, bad, Started, ok]), Verdict::Waiting(deps[0]));
        assert_eq!(
            at([bad, Waiting, Waiting, Waiting]),
            Verdict::Never(deps[0], bad)
        );
        assert_eq!(at([ok, ok, Started, ok]), Verdict::Never(deps[1], ok));
        // An array: every task must hold.
        let d = parse("afterok:7").unwrap();
        assert_eq!(evaluate(&d, |_| vec![ok, Started]), Verdict::Waiting(d[0]));
        assert_eq!(evaluate(&d, |_| vec![ok, bad]), Verdict::Never(d[0], bad));
        assert_eq!(evaluate(&d, |_| vec![ok, ok]), Verdict::Met);
    }
}
