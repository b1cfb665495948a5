//! Fuzz targets `cli_duration`, `cli_node`, `cli_mesh`: the small syntaxes of the command
//! line (`prun --time`, `gangctl drain X,Y`, `gangctl start --mesh WxH`). What parses
//! prints back to text that parses to the same value; what does not is refused with the
//! message clap shows. See crates/gang-fuzz/README.md.

use proptest::prelude::*;

use crate::args::parse::{parse_duration, parse_mesh, parse_node};

/// Seconds as `1d2h3m4s` (zero units left out).
fn render(secs: u64) -> String {
    let parts = [
        (secs / 86400, 'd'),
        (secs % 86400 / 3600, 'h'),
        (secs % 3600 / 60, 'm'),
        (secs % 60, 's'),
    ];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, u)| format!("{n}{u}"))
        .collect()
}

fn check_duration(text: String) -> Result<u64, TestCaseError> {
    match parse_duration(&text) {
        Ok(secs) => {
            let t = text.trim();
            prop_assert!(
                t.eq_ignore_ascii_case("unlimited")
                    || t.eq_ignore_ascii_case("infinite")
                    || t.chars()
                        .all(|c| c.is_ascii_digit() || "smhdinec:-".contains(c)),
                "{text:?} parsed to {secs}"
            );
            // A bare number is minutes (Slurm's MM).
            prop_assert_eq!(parse_duration(&(secs / 60).to_string()), Ok(secs / 60 * 60));
            if secs > 0 {
                prop_assert_eq!(parse_duration(&render(secs)), Ok(secs));
            }
        }
        Err(e) => prop_assert!(e.starts_with("expected a duration: MM"), "{e}"),
    }
    Ok(1)
}

fn check_node(text: String) -> Result<u64, TestCaseError> {
    match parse_node(&text) {
        Ok((x, y)) => prop_assert_eq!(parse_node(&format!("{x},{y}")), Ok((x, y))),
        Err(e) => prop_assert!(e.starts_with("expected a node as X,Y"), "{e}"),
    }
    Ok(1)
}

fn check_mesh(text: String) -> Result<u64, TestCaseError> {
    match parse_mesh(&text) {
        Ok((w, h)) => {
            prop_assert!(w >= 1 && h >= 1, "{text:?} parsed to {w}x{h}");
            prop_assert_eq!(parse_mesh(&format!("{w}x{h}")), Ok((w, h)));
        }
        Err(e) => prop_assert!(e.starts_with("expected the mesh as WxH"), "{e}"),
    }
    Ok(1)
}

#[test]
fn fuzz_cli_duration() {
    let seeds = gang_fuzz::seeds("cli_duration");
    gang_fuzz::run("cli_duration", 600, gang_fuzz::text(seeds), check_duration);
}

#[test]
fn fuzz_cli_node() {
    let seeds = gang_fuzz::seeds("cli_node");
    gang_fuzz::run("cli_node", 400, gang_fuzz::text(seeds), check_node);
}

#[test]
fn fuzz_cli_mesh() {
    let seeds = gang_fuzz::seeds("cli_mesh");
    gang_fuzz::run("cli_mesh", 400, gang_fuzz::text(seeds), check_mesh);
}

/// Regenerate the seeds: `cargo test -p gang-cli --lib write_fuzz_corpus -- --ignored`.
#[test]
#[ignore = "writes crates/gang-fuzz/corpus/cli_*"]
fn write_fuzz_corpus() {
    let targets: [(&str, &[&str]); 3] = [
        (
            "cli_duration",
            &[
                "90",
                "0",
                "30s",
                "10m",
                "2h",
                "1d",
                "1h30m",
                " 5m ",
                "1d2h3m4s",
                "1h30",
                "h1",
                "1.5h",
                "-5",
                "5 m",
                "99999999999999999999",
                "9999999999999999999h",
            ],
        ),
        (
            "cli_node",
            &[
                "1,2",
                "0, 3",
                "4294967295,0",
                "1x2",
                "1,",
                ",2",
                "-1,2",
                "1,2,3",
                "a,b",
            ],
        ),
        (
            "cli_mesh",
            &[
                "4x4",
                "3X3",
                "1x1",
                "4294967295x1",
                "0x2",
                "4x",
                "x",
                "4,2",
                "4",
            ],
        ),
    ];
    for (target, texts) in targets {
        let seeds: Vec<(String, Vec<u8>)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("{i:02}.txt"), t.as_bytes().to_vec()))
            .collect();
        gang_fuzz::write_seeds(target, &seeds);
    }
}
