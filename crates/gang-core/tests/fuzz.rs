//! Fuzz target `request`: the job shape a user writes (`"4x2"`, `"8"`), parsed as the
//! master parses `JobSpec.shape`. See crates/gang-fuzz/README.md.

use gang_core::{Request, Shape};
use proptest::prelude::*;

const TARGET: &str = "request";

/// Meshes the parsed requests are resolved on: a single node, square, wide, tall, large.
const MESHES: [Shape; 5] = [
    Shape::new(1, 1),
    Shape::new(4, 4),
    Shape::new(16, 2),
    Shape::new(1, 8),
    Shape::new(64, 64),
];

fn check(text: String) -> Result<u64, TestCaseError> {
    let r = match text.parse::<Request>() {
        Ok(r) => r,
        Err(e) => {
            prop_assert!(!e.to_string().trim().is_empty(), "a refusal says why");
            return Ok(1);
        }
    };
    // What parses is printed back the way users write it and parses to the same request.
    let written = match r {
        Request::Shape(s) => {
            prop_assert!(
                s.w >= 1 && s.h >= 1,
                "{text:?} parsed to an empty shape {s}"
            );
            format!("{}x{}", s.w, s.h)
        }
        Request::Nodes(n) => {
            prop_assert!(n >= 1, "{text:?} parsed to {n} nodes");
            n.to_string()
        }
    };
    prop_assert_eq!(written.parse::<Request>(), Ok(r));
    let _ = r.to_string();
    for mesh in MESHES {
        match (r, r.resolve(mesh)) {
            (Request::Shape(asked), Ok(s)) => {
                prop_assert_eq!(s, asked);
                prop_assert!(s.fits_in_rotating(mesh));
            }
            (Request::Nodes(n), Ok(s)) => {
                prop_assert!(
                    s.area() >= n && s.fits_in(mesh),
                    "{n} nodes -> {s} on {mesh}"
                );
            }
            (_, Err(e)) => prop_assert!(!e.to_string().trim().is_empty()),
        }
    }
    Ok(1)
}

#[test]
fn fuzz_request() {
    gang_fuzz::run(
        TARGET,
        1000,
        gang_fuzz::text(gang_fuzz::seeds(TARGET)),
        check,
    );
}

/// Regenerate the seeds: `cargo test -p gang-core --test fuzz -- --ignored`.
#[test]
#[ignore = "writes crates/gang-fuzz/corpus/request"]
fn write_fuzz_corpus() {
    let seeds = [
        ("shape", "4x2"),
        ("shape-upper", "4X2"),
        ("shape-star", "4*2"),
        ("shape-spaced", " 3 x 5 "),
        ("shape-signed", "+4x+2"),
        ("unit", "1x1"),
        ("count", "8"),
        ("count-spaced", " 8 "),
        ("zero-side", "0x2"),
        ("negative", "-3"),
        ("half", "4x"),
        ("word", "abc"),
        ("u32-max", "4294967295x1"),
        ("u32-over", "4294967296x1"),
        ("i64-max", "9223372036854775807"),
        ("empty", ""),
    ];
    let seeds: Vec<(String, Vec<u8>)> = seeds
        .iter()
        .map(|(name, text)| (format!("{name}.txt"), text.as_bytes().to_vec()))
        .collect();
    gang_fuzz::write_seeds(TARGET, &seeds);
}
