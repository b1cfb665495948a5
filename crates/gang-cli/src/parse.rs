//! The small syntaxes of the command line. Each parser returns a message fit for clap's
//! "invalid value" error.

/// A duration in whole seconds: `90` (seconds), `30s`, `10m`, `2h`, `1d`, or a sum of
/// those (`1h30m`). `0` means no limit.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let bad = || format!("expected a duration like 90, 30s, 10m or 2h, got {s:?}");
    let t = s.trim();
    if t.is_empty() {
        return Err(bad());
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u64>().map_err(|_| bad());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(bad()),
        };
        if digits.is_empty() {
            return Err(bad());
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() {
        // "1h30": a trailing number without a unit is ambiguous.
        return Err(bad());
    }
    Ok(total)
}

/// A node of the mesh as `X,Y` (e.g. `2,3`).
pub fn parse_node(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected a node as X,Y (e.g. 2,3), got {s:?}");
    let (x, y) = s.split_once(',').ok_or_else(bad)?;
    let x = x.trim().parse::<u32>().map_err(|_| bad())?;
    let y = y.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((x, y))
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
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("30s"), Ok(30));
        assert_eq!(parse_duration("10m"), Ok(600));
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
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.starts_with("expected a duration"), "{bad:?}: {e}");
        }
        assert!(
            parse_duration("9999999999999999999h").is_err(),
            "overflow is an error"
        );
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node("1,2"), Ok((1, 2)));
        assert_eq!(parse_node("0, 3"), Ok((0, 3)));
        for bad in ["1x2", "1", "1,", ",2", "a,b", "-1,2", "1,2,3"] {
            let e = parse_node(bad).unwrap_err();
            assert!(e.starts_with("expected a node as X,Y"), "{bad:?}: {e}");
        }
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
