//! The small syntaxes of the command line. Each parser returns a message fit for clap's
//! "invalid value" error.

/// What [`parse_duration`] accepts, for its errors and `--help`.
pub const DURATION_FORMS: &str = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS as in \
Slurm (a bare number is minutes), or with units: 90s, 5m, 5min, 2h, 1d, 1h30m; 0 or \
unlimited: none";

/// A duration in whole seconds, as Slurm's `--time` takes it: `MM`, `MM:SS`, `HH:MM:SS`,
/// `D-HH`, `D-HH:MM`, `D-HH:MM:SS` (a bare number is minutes, as in Slurm), or with units:
/// `90s`, `5m`/`5min`, `2h`, `1d`, or a sum of those (`1h30m`). `0`, `unlimited` and
/// `infinite` mean no limit (0).
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let bad = || format!("expected a duration: {DURATION_FORMS}; got {s:?}");
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") {
        return Ok(0);
    }
    if t.is_empty() {
        return Err(bad());
    }
    if t.bytes()
        .all(|b| b.is_ascii_digit() || b == b':' || b == b'-')
    {
        return slurm_time(t).ok_or_else(bad);
    }
    with_units(t).ok_or_else(bad)
}

/// A client timeout (`--timeout`, `GANG_TIMEOUT`): a bare number is seconds, as `curl
/// --max-time` and `timeout(1)` take it (a time limit's bare number is minutes, as in
/// Slurm: the two would be confused otherwise); any other form as [`parse_duration`].
pub fn parse_timeout(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse()
            .map_err(|_| format!("expected a timeout in seconds (or 10s, 1m, ...); got {s:?}"));
    }
    parse_duration(s)
}

/// Slurm's clock forms; `None` if `t` is not one of them or overflows.
fn slurm_time(t: &str) -> Option<u64> {
    let num = |p: &str| -> Option<u64> {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse().ok())
            .flatten()
    };
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, t),
    };
    let parts = clock.split(':').map(num).collect::<Option<Vec<u64>>>()?;
    // Units of each field, by form: with days the fields are hours first, else minutes
    // (MM, MM:SS) or hours (HH:MM:SS).
    let units: &[u64] = match (days.is_some(), parts.len()) {
        (false, 1) => &[60],
        (false, 2) => &[60, 1],
        (false, 3) => &[3600, 60, 1],
        (true, 1) => &[3600],
        (true, 2) => &[3600, 60],
        (true, 3) => &[3600, 60, 1],
        _ => return None,
    };
    let mut total = days.unwrap_or(0).checked_mul(86400)?;
    for (n, u) in parts.iter().zip(units) {
        total = total.checked_add(n.checked_mul(*u)?)?;
    }
    Some(total)
}

/// Numbers with units, summed: `90s`, `5m`, `5min`, `2h`, `1d`, `1h30m`.
fn with_units(t: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit: u64 = match &rest[..letters] {
            "s" | "sec" => 1,
            "m" | "min" => 60,
            "h" => 3600,
            "d" => 86400,
            // "1h30": a trailing number without a unit is ambiguous.
            _ => return None,
        };
        rest = &rest[letters..];
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    Some(total)
}

/// A node of the mesh as `X,Y` (e.g. `2,3`) or `(X,Y)`, as the master names nodes.
pub fn parse_node(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected a node as X,Y (e.g. 2,3), got {s:?}");
    let t = strip_parens(s);
    let (x, y) = t.split_once(',').ok_or_else(bad)?;
    let x = x.trim().parse::<u32>().map_err(|_| bad())?;
    let y = y.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((x, y))
}

fn strip_parens(s: &str) -> &str {
    let t = s.trim();
    t.strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(t)
}

/// At most this many nodes in one `X,Y` range (the largest mesh `gangctl start` runs is
/// 1024 nodes; a real one may be larger, but a typo should not become a million requests).
pub const MAX_NODE_SET: u64 = 65_536;

/// Nodes as `X,Y`, `(X,Y)`, or ranges on either axis: `0-3,1` is x in 0..=3 at y=1,
/// `0-1,0-1` the four nodes of that square. Row by row (y, then x).
pub fn parse_node_set(s: &str) -> Result<Vec<(u32, u32)>, String> {
    let bad = || {
        format!(
            "expected a node as X,Y (e.g. 2,3), (X,Y), or with ranges as X0-X1,Y (e.g. 0-3,1) \
             or X0-X1,Y0-Y1, got {s:?}"
        )
    };
    let t = strip_parens(s);
    let (x, y) = t.split_once(',').ok_or_else(bad)?;
    let range = |p: &str| -> Result<(u32, u32), String> {
        let num = |n: &str| n.trim().parse::<u32>().map_err(|_| bad());
        match p.split_once('-') {
            None => num(p).map(|n| (n, n)),
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!(
                        "node range {p:?} in {s:?} runs backwards: write {b}-{a}"
                    ));
                }
                Ok((a, b))
            }
        }
    };
    let ((x0, x1), (y0, y1)) = (range(x)?, range(y)?);
    let count = u64::from(x1 - x0 + 1) * u64::from(y1 - y0 + 1);
    if count > MAX_NODE_SET {
        return Err(format!(
            "{s:?} names {count} nodes; the limit is {MAX_NODE_SET} per argument"
        ));
    }
    Ok((y0..=y1)
        .flat_map(|y| (x0..=x1).map(move |x| (x, y)))
        .collect())
}

/// A mesh as `WxH` (e.g. `4x4`), both at least 1.
pub fn parse_mesh(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected the mesh as WxH (e.g. 4x4), got {s:?}");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let w = w.trim().parse::<u32>().map_err(|_| bad())?;
    let h = h.trim().parse::<u32>().map_err(|_| bad())?;
    if w == 0 || h == 0 {
        return Err(bad());
    }
    Ok((w, h))
}

/// `gangctl start --max-agents`: 1 to [`gang_local::MAX_AGENTS_BOUND`].
pub fn parse_max_agents(s: &str) -> Result<usize, String> {
    let bound = gang_local::MAX_AGENTS_BOUND;
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of agents from 1 to {bound}, got {s:?}"))?;
    if n == 0 || n > bound {
        return Err(format!(
            "{n} is not from 1 to {bound}: a local cluster runs one agent process per node on \
             this one machine ({} cores), and {bound} is the most it may run",
            gang_local::cores()
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_take_bare_seconds() {
        assert_eq!(parse_timeout("1"), Ok(1));
        assert_eq!(parse_timeout("10s"), Ok(10));
        assert_eq!(parse_timeout("2m"), Ok(120));
        assert_eq!(parse_timeout("0"), Ok(0));
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn durations() {
        // Slurm's forms: a bare number is minutes.
        assert_eq!(parse_duration("90"), Ok(5400));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("5:30"), Ok(330));
        assert_eq!(parse_duration("1:00:00"), Ok(3600));
        assert_eq!(parse_duration("2-12"), Ok(2 * 86400 + 12 * 3600));
        assert_eq!(parse_duration("1-01:30"), Ok(86400 + 3600 + 1800));
        assert_eq!(parse_duration("1-00:00:05"), Ok(86405));
        assert_eq!(parse_duration("unlimited"), Ok(0));
        // Units.
        assert_eq!(parse_duration("30s"), Ok(30));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("10m"), Ok(600));
        assert_eq!(parse_duration("5min"), Ok(300));
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("1d"), Ok(86400));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration(" 5m "), Ok(300));
        for bad in [
            "",
            "m",
            "10x",
            "-5",
            "1.5h",
            "1h30",
            "h1",
            "99999999999999999999",
            "5 m",
            "1:2:3:4",
            "1-2:3:4:5",
            "1-",
            "-1",
            ":5",
            "5:",
            "1--2",
            "5mins",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                e.starts_with("expected a duration: MM, MM:SS"),
                "{bad:?}: {e}"
            );
            assert!(e.contains("90s, 5m"), "{bad:?}: {e}");
        }
        assert!(
            parse_duration("9999999999999999999h").is_err(),
            "overflow is an error"
        );
        assert!(parse_duration("99999999999999999-00").is_err());
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node("1,2"), Ok((1, 2)));
        assert_eq!(parse_node("0, 3"), Ok((0, 3)));
        assert_eq!(parse_node("(1,0)"), Ok((1, 0)));
        for bad in ["1x2", "1", "1,", ",2", "a,b", "-1,2", "1,2,3", "(1,2"] {
            let e = parse_node(bad).unwrap_err();
            assert!(e.starts_with("expected a node as X,Y"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn node_sets() {
        assert_eq!(parse_node_set("1,0"), Ok(vec![(1, 0)]));
        assert_eq!(parse_node_set("(1,0)"), Ok(vec![(1, 0)]));
        assert_eq!(
            parse_node_set("0-3,1"),
            Ok(vec![(0, 1), (1, 1), (2, 1), (3, 1)])
        );
        assert_eq!(
            parse_node_set("0-1,2-3"),
            Ok(vec![(0, 2), (1, 2), (0, 3), (1, 3)])
        );
        for bad in ["1x2", "1", "0-,1", "a-b,1", "1,2,3", "-1,2"] {
            let e = parse_node_set(bad).unwrap_err();
            assert!(e.starts_with("expected a node as X,Y"), "{bad:?}: {e}");
        }
        let e = parse_node_set("3-0,1").unwrap_err();
        assert!(e.contains("runs backwards: write 0-3"), "{e}");
        assert!(
            parse_node_set("0-999,0-999")
                .unwrap_err()
                .contains("limit is 65536")
        );
    }

    #[test]
    fn meshes() {
        assert_eq!(parse_mesh("4x2"), Ok((4, 2)));
        assert_eq!(parse_mesh("3X3"), Ok((3, 3)));
        for bad in ["4", "0x2", "4x0", "x", "4x", "4,2", "axb"] {
            assert!(parse_mesh(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn agent_ceilings() {
        assert_eq!(parse_max_agents("1"), Ok(1));
        assert_eq!(parse_max_agents("1024"), Ok(1024));
        for bad in ["0", "1025", "100000"] {
            let e = parse_max_agents(bad).unwrap_err();
            assert!(e.contains("is not from 1 to 1024"), "{bad:?}: {e}");
        }
        let e = parse_max_agents("many").unwrap_err();
        assert!(e.starts_with("expected a number of agents"), "{e}");
    }
}
