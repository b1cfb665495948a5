//! Job arrays, as Slurm's `--array`: task indexes `1-100`, `1,3,5-7`, `0-15:4` (a step),
//! and `%N` at most N tasks queued for nodes or running at once.

use serde::{Deserialize, Serialize};

/// The highest task index (Slurm's default MaxArraySize is 1001: indexes 0-1000).
pub const MAX_INDEX: u32 = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    /// Task indexes, ascending, distinct.
    pub tasks: Vec<u32>,
    /// At most this many at once (0: no limit).
    pub throttle: u32,
}

/// The forms accepted, for errors and help.
pub const FORMS: &str = "indexes and ranges, comma-separated, with an optional step and \
limit: 1-100, 1,3,5-7, 0-15:4, 1-100%10";

/// `1-100%10`; `max_tasks` bounds how many tasks one array may have.
pub fn parse(s: &str, max_tasks: usize) -> Result<ArraySpec, String> {
    let (list, throttle) = match s.trim().split_once('%') {
        Some((l, t)) => {
            let t: u32 = t
                .trim()
                .parse()
                .map_err(|_| format!("array {s:?}: the limit after % must be a number"))?;
            if t == 0 {
                return Err(format!("array {s:?}: the limit after % must be at least 1"));
            }
            (l, t)
        }
        None => (s.trim(), 0),
    };
    let num = |w: &str| -> Result<u32, String> {
        let n: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("array {s:?}: {w:?} is not a task index; expected {FORMS}"))?;
        if n > MAX_INDEX {
            return Err(format!(
                "array {s:?}: index {n} is above the highest, {MAX_INDEX}"
            ));
        }
        Ok(n)
    };
    let mut tasks = Vec::new();
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, st)) => {
                let st = num(st)?;
                if st == 0 {
                    return Err(format!("array {s:?}: a step must be at least 1"));
                }
                (r, st)
            }
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let a = num(range)?;
                (a, a)
            }
        };
        if a > b {
            return Err(format!("array {s:?}: range {range:?} runs backwards"));
        }
        let mut i = a;
        while i <= b {
            tasks.push(i);
            if tasks.len() > max_tasks {
                return Err(format!(
                    "array {s:?} has more than {max_tasks} tasks; the limit is {max_tasks} \
                     (max_array_tasks)"
                ));
            }
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    tasks.sort_unstable();
    tasks.dedup();
    if tasks.is_empty() {
        return Err(format!("array {s:?} has no task; expected {FORMS}"));
    }
    Ok(ArraySpec { tasks, throttle })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_forms() {
        let a = parse("1-5%2", 1000).unwrap();
        assert_eq!((a.tasks, a.throttle), (vec![1, 2, 3, 4, 5], 2));
        assert_eq!(parse("0-15:4", 1000).unwrap().tasks, [0, 4, 8, 12]);
        assert_eq!(parse("7,1,3-4,3", 1000).unwrap().tasks, [1, 3, 4, 7]);
        assert!(parse("5-1", 1000).unwrap_err().contains("backwards"));
        assert!(parse("1-10%0", 1000).unwrap_err().contains("at least 1"));
        assert!(
            parse("1-2000", 1000)
                .unwrap_err()
                .contains("the limit is 1000")
        );
        assert!(parse("x", 1000).unwrap_err().contains("not a task index"));
        assert!(parse("1-3:0", 1000).unwrap_err().contains("step"));
        assert!(parse("200000", 1000).unwrap_err().contains("highest"));
    }
}
