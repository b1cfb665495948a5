//! `-N`/`--nodes` and `-n`/`--ntasks` given together, as Slurm users type them every day
//! (`srun -N 4 -n 4`). One rank runs on each node here, so both ask the same thing: given
//! once or several times, they must agree, and a disagreement is explained rather than
//! refused as a repeated option.

use gang_core::Request;

/// The one node request of `-N` values (`nodes`) and `-n` values (`ntasks`): `None` if
/// neither was given. Agreeing values are one request: the same count, the same shape, or
/// a shape and a count of its area (the shape is kept). Values that do not parse are left
/// to the master, which names the syntax, unless they differ from the others.
pub fn one_request(nodes: &[String], ntasks: &[String]) -> Result<Option<String>, String> {
    let given: Vec<(&str, &str)> = ntasks
        .iter()
        .map(|v| ("-n", v.as_str()))
        .chain(nodes.iter().map(|v| ("-N", v.as_str())))
        .collect();
    let Some(&(_, first)) = given.first() else {
        return Ok(None);
    };
    let mut kept = first.trim().to_string();
    for &(flag, value) in &given[1..] {
        let (a, b) = (kept.as_str(), value.trim());
        if a == b {
            continue;
        }
        match (a.parse::<Request>(), b.parse::<Request>()) {
            (Ok(x), Ok(y)) if area(x) == area(y) && !(is_shape(x) && is_shape(y)) => {
                // The shape says more than its count: keep it.
                if is_shape(y) {
                    kept = b.to_string();
                }
            }
            _ => {
                let (first_flag, _) = given
                    .iter()
                    .find(|(_, v)| v.trim() == a)
                    .copied()
                    .unwrap_or(given[0]);
                return Err(disagreement((first_flag, a), (flag, b)));
            }
        }
    }
    Ok(Some(kept))
}

fn area(r: Request) -> u64 {
    match r {
        Request::Shape(s) => u64::from(s.w) * u64::from(s.h),
        Request::Nodes(n) => n,
    }
}

fn is_shape(r: Request) -> bool {
    matches!(r, Request::Shape(_))
}

/// What two values ask, in Slurm's words, and what to do.
fn disagreement(a: (&str, &str), b: (&str, &str)) -> String {
    let says = |(flag, v): (&str, &str)| {
        let what = match (flag, v.parse::<Request>()) {
            (_, Ok(Request::Shape(s))) => format!("a {s} submesh"),
            ("-n", Ok(Request::Nodes(n))) => format!("{n} tasks"),
            (_, Ok(Request::Nodes(n))) => format!("{n} nodes"),
            (_, Err(_)) => format!("{v:?}"),
        };
        format!("{flag} {v} asks {what}")
    };
    format!(
        "{} and {}: one rank runs on each node here, so -N and -n say the same; give one of \
         them, or the same count",
        says(a),
        says(b)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(nodes: &[&str], ntasks: &[&str]) -> Result<Option<String>, String> {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        one_request(&v(nodes), &v(ntasks))
    }

    #[test]
    fn agreeing_values_are_one_request() {
        assert_eq!(one(&[], &[]), Ok(None));
        assert_eq!(one(&["4"], &[]), Ok(Some("4".into())));
        assert_eq!(one(&[], &["2x2"]), Ok(Some("2x2".into())));
        assert_eq!(one(&["4"], &["4"]), Ok(Some("4".into())));
        assert_eq!(one(&["4", "4"], &[" 4"]), Ok(Some("4".into())));
        // A shape and the count of its area: the shape.
        assert_eq!(one(&["4"], &["2x2"]), Ok(Some("2x2".into())));
        assert_eq!(one(&["2x2"], &["4"]), Ok(Some("2x2".into())));
        assert_eq!(one(&["2x2"], &["2x2"]), Ok(Some("2x2".into())));
    }

    #[test]
    fn disagreeing_values_are_explained() {
        assert_eq!(
            one(&["2"], &["4"]).unwrap_err(),
            "-n 4 asks 4 tasks and -N 2 asks 2 nodes: one rank runs on each node here, so -N \
             and -n say the same; give one of them, or the same count"
        );
        let e = one(&["2x2"], &["4x1"]).unwrap_err();
        assert!(
            e.starts_with("-n 4x1 asks a 4x1 submesh and -N 2x2 asks a 2x2 submesh"),
            "{e}"
        );
        let e = one(&["3"], &["2x2"]).unwrap_err();
        assert!(e.contains("-N 3 asks 3 nodes"), "{e}");
        let e = one(&["x"], &["4"]).unwrap_err();
        assert!(e.contains("-N x asks \"x\""), "{e}");
        let e = one(&["4", "8"], &[]).unwrap_err();
        assert!(
            e.starts_with("-N 4 asks 4 nodes and -N 8 asks 8 nodes"),
            "{e}"
        );
    }
}
