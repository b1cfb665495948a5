//! File name patterns for a job's output (`prun --output/--error`, sbatch's `-o`/`-e`):
//! `%j` the job id, `%r` the rank, `%n` the node as `X-Y`, `%%` a percent sign; for a task
//! of a job array, `%A` the array's job id and `%a` the task index (the master puts those
//! in at submission, [`expand_array`], so agents never see them).
//!
//! Here because three programs read the same pattern: `prun` and the master refuse a bad
//! one before the job is queued, and each agent expands it for its rank. One parser
//! means a pattern the edge accepted can never fail later on a node.

/// The longest pattern accepted: Linux's PATH_MAX. Expansion grows it by a few digits
/// at most per escape, and the kernel refuses what is then too long, naming the file.
pub const MAX_LEN: usize = 4096;

/// Check a pattern. The error names the problem (for `--output`, `--error` or the API
/// field, which the caller puts in front).
pub fn validate(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("the file pattern is empty".into());
    }
    if pattern.len() > MAX_LEN {
        return Err(format!(
            "the file pattern is {} bytes long; the limit is {MAX_LEN} (PATH_MAX)",
            pattern.len()
        ));
    }
    if pattern.contains('\0') {
        return Err("the file pattern holds a NUL byte".into());
    }
    if pattern.ends_with('/') {
        return Err(format!(
            "{pattern:?} names a directory; give a file name (e.g. {pattern}%j-%r.out)"
        ));
    }
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some('j' | 'r' | 'n' | '%' | 'a' | 'A') => {}
            Some(other) => {
                return Err(format!(
                    "unknown %{other} in {pattern:?}: expected %j (job id), %r (rank), %n (node X-Y), \
                     %A and %a (array job id and task index) or %%"
                ));
            }
            None => {
                return Err(format!(
                    "{pattern:?} ends with a lone %: write %% for a percent sign"
                ));
            }
        }
    }
    Ok(())
}

/// Whether the pattern has `%a` or `%A`, which only an array's task can fill in.
pub fn has_array_escapes(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' && matches!(chars.next(), Some('a' | 'A')) {
            return true;
        }
    }
    false
}

/// Fill in `%A` (the array's job id) and `%a` (the task index), leaving the other escapes
/// (`%%` included) for the agent's [`expand`].
pub fn expand_array(pattern: &str, array_job: u64, task: u32) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('A') => out.push_str(&array_job.to_string()),
            Some('a') => out.push_str(&task.to_string()),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Whether each rank gets a file of its own (the pattern has `%r`), or several ranks
/// share one (then it is appended to, never truncated: no rank may erase another's lines).
pub fn per_rank(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next() == Some('r') {
            return true;
        }
    }
    false
}

/// The file name for one rank. A pattern that does not [`validate`] is expanded as far as
/// it goes (unknown escapes are kept as they are); callers validate first.
pub fn expand(pattern: &str, job: u64, rank: u32, node: (u32, u32)) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') => out.push_str(&job.to_string()),
            Some('r') => out.push_str(&rank.to_string()),
            Some('n') => out.push_str(&format!("{}-{}", node.0, node.1)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_escapes_are_filled_in_first() {
        assert!(validate("%A_%a.out").is_ok());
        assert!(has_array_escapes("x-%a") && has_array_escapes("%A"));
        assert!(!has_array_escapes("%%a-%j"));
        let p = expand_array("o/%A_%a-%r.%%a", 12, 7);
        assert_eq!(p, "o/12_7-%r.%%a");
        assert_eq!(expand(&p, 19, 1, (0, 0)), "o/12_7-1.%a");
    }

    #[test]
    fn expands_every_escape() {
        assert_eq!(
            expand("out/%j.%r@%n.%%log", 42, 3, (1, 2)),
            "out/42.3@1-2.%log"
        );
        assert_eq!(expand("plain.txt", 1, 0, (0, 0)), "plain.txt");
    }

    #[test]
    fn refuses_what_sbatch_users_mistype() {
        assert!(validate("%j-%r.out").is_ok());
        assert!(validate("/tmp/100%%.%n").is_ok());
        assert_eq!(validate("").unwrap_err(), "the file pattern is empty");
        let e = validate("job-%x.out").unwrap_err();
        assert!(
            e.starts_with("unknown %x in \"job-%x.out\": expected %j"),
            "{e}"
        );
        assert!(validate("a%").unwrap_err().contains("lone %"));
        assert!(validate("logs/").unwrap_err().contains("names a directory"));
        assert!(validate("a\0b").is_err());
        assert!(
            validate(&"a".repeat(MAX_LEN + 1))
                .unwrap_err()
                .contains("4096")
        );
    }

    #[test]
    fn per_rank_only_with_a_rank_escape() {
        assert!(per_rank("%j-%r.out"));
        assert!(!per_rank("%j.out"));
        assert!(!per_rank("100%%r")); // "%%" then a plain "r"
    }
}
