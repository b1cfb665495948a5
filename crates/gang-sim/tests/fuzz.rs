//! Fuzz target `swf`: trace files as `gang-sim` reads them, plain and gzip-compressed. See
//! crates/gang-fuzz/README.md.
//!
//! Every input is parsed strictly and leniently (`skip_bad`); the two must agree, every
//! job taken must satisfy what the simulator relies on, and the same bytes gzip-compressed
//! (as one member, and split over two) must read exactly as the plain text.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use gang_sim::swf::{self, Swf, SwfError};
use proptest::prelude::*;

const TARGET: &str = "swf";
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

/// `swf::read` of `data` as a file (where the gzip magic is detected).
fn read_file(data: &[u8], skip_bad: bool) -> Result<Swf, SwfError> {
    let dir = gang_fuzz::scratch_dir();
    let path = dir.path().join("trace.swf");
    std::fs::write(&path, data).expect("trace written");
    swf::read(&path, skip_bad)
}

/// Where and why a parse failed, without the file name `read` adds.
fn failure(e: &SwfError) -> (usize, String) {
    match e {
        SwfError::Malformed { line, reason, .. } => (*line, reason.clone()),
        SwfError::Io { .. } => (0, e.to_string()),
    }
}

fn same(a: &Result<Swf, SwfError>, b: &Result<Swf, SwfError>) -> Result<(), TestCaseError> {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(&a.jobs, &b.jobs);
            prop_assert_eq!(&a.header, &b.header);
            prop_assert_eq!(&a.bad_lines, &b.bad_lines);
        }
        (Err(a), Err(b)) => {
            let ((la, ra), (lb, rb)) = (failure(a), failure(b));
            prop_assert_eq!(la, lb);
            prop_assert!(rb.starts_with(&ra), "{ra:?} vs {rb:?}");
        }
        _ => prop_assert!(false, "one read failed, the other did not: {a:?} vs {b:?}"),
    }
    Ok(())
}

/// What the simulator relies on in a parsed trace.
fn well_formed(swf: &Swf) -> Result<(), TestCaseError> {
    let mut last = 0;
    for j in &swf.jobs {
        prop_assert!(j.line > last, "job lines in order");
        last = j.line;
        prop_assert!(j.submit.is_finite() && j.submit >= 0.0, "{j:?}");
        prop_assert!(j.wait.is_none_or(|w| w.is_finite() && w >= 0.0), "{j:?}");
        prop_assert!(j.runtime.is_none_or(|r| r.is_finite() && r >= 0.0), "{j:?}");
        prop_assert!(j.procs.is_none_or(|p| p >= 1), "{j:?}");
        prop_assert!(
            j.requested_time.is_none_or(|t| t.is_finite() && t > 0.0),
            "{j:?}"
        );
    }
    for (line, why) in &swf.bad_lines {
        prop_assert!(!why.is_empty(), "line {line} skipped without a reason");
        prop_assert!(
            swf.jobs.iter().all(|j| j.line != *line),
            "line {line} both taken and skipped"
        );
    }
    Ok(())
}

fn check(data: Vec<u8>) -> Result<u64, TestCaseError> {
    let strict = swf::parse(&data[..], false);
    let lenient = swf::parse(&data[..], true);
    match (&strict, &lenient) {
        (Ok(s), Ok(l)) => {
            prop_assert!(l.bad_lines.is_empty());
            prop_assert_eq!(&s.jobs, &l.jobs);
            well_formed(s)?;
        }
        (Err(e), Ok(l)) => {
            // Strict stops at the first bad line, the one leniency skips first.
            let (line, reason) = failure(e);
            prop_assert!(!reason.starts_with("unreadable"), "{reason}");
            prop_assert_eq!(l.bad_lines.first(), Some(&(line, reason)));
            well_formed(l)?;
        }
        (Err(a), Err(b)) => {
            // Only unreadable text (not UTF-8) stops a lenient parse.
            let ((la, ra), (lb, rb)) = (failure(a), failure(b));
            prop_assert!(rb.starts_with("unreadable"), "{rb}");
            prop_assert!(la <= lb && (la < lb || ra == rb));
        }
        (Ok(_), Err(e)) => prop_assert!(false, "strict parse passed, lenient failed: {e}"),
    }
    if data.starts_with(&GZIP_MAGIC) {
        // Compressed (mutated seeds): whatever the stream holds, no panic, no hang.
        let _ = read_file(&data, false);
        let _ = read_file(&data, true);
        return Ok(1);
    }
    same(&strict, &read_file(&data, false))?;
    same(&lenient, &read_file(&gzip(&data), true))?;
    // Members are concatenated (`.swf.gz` files written by appending).
    let (a, b) = data.split_at(data.len() / 2);
    let two = [gzip(a), gzip(b)].concat();
    same(&strict, &read_file(&two, false))?;
    Ok(4)
}

#[test]
fn fuzz_swf() {
    gang_fuzz::run(
        TARGET,
        500,
        gang_fuzz::bytes(gang_fuzz::seeds(TARGET)),
        check,
    );
}

const SAMPLE: &str = "; Version: 2.2\n; MaxProcs: 100\n;\n\
    1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n\
    \n\
    2 5 -1 -1 -1 -1 -1 8 -1 -1 5 1 1 -1 -1 -1 -1 -1\n";

/// The opening of a cleaned archive trace (KTH SP2), its alignment and header as published.
const ARCHIVE: &str = "; Version: 2.2\n\
    ; Computer: IBM SP2\n\
    ; MaxJobs: 28490\n\
    ; UnixStartTime: 843480031\n\
    ; StartTime: Mon Sep 23 14:00:31 CEST 1996\n\
    ; MaxNodes: 100\n\
    ; MaxProcs: 100\n\
    ; Note: uses the EASY scheduler\n\
    ;\n\
    \x20  15   599850 192180   3477    4     -1    -1    4  53940    -1  1  12  12  -1 -1 -1 -1 -1\n\
    \x20  16   600022  11940   2488   25     -1    -1   25   3600    -1  1  13  13  -1 -1 -1 -1 -1\n\
    \x20  17   600476 364560 215337    5     -1    -1    5 215400    -1  0  14  14  -1 -1 -1 -1 -1\n\
    \x20  20   605396      0     16    1     -1    -1    1     60    -1  1  17  17  -1 -1 -1 -1 -1\n";

/// Regenerate the seeds: `cargo test -p gang-sim --test fuzz -- --ignored`.
#[test]
#[ignore = "writes crates/gang-fuzz/corpus/swf"]
fn write_fuzz_corpus() {
    let text: &[(&str, String)] = &[
        ("sample.swf", SAMPLE.into()),
        ("archive.swf", ARCHIVE.into()),
        (
            "header-only.swf",
            "; Version: 2.2\n; MaxProcs: 64\n; Note: no jobs\n".into(),
        ),
        (
            "malformed.swf",
            format!("{SAMPLE}3 7 1 1 1\n4 x 1 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n"),
        ),
        (
            "edges.swf",
            "5 1e308 -1 -1 0 -1 -1 0 0 -1 1 1 1 -1 -1 -1 -1 -1\n\
             6 0.5 -0 1.5 2.5 -1 -1 -1 -1 -1 -7 1 1 -1 -1 -1 -1 -1\n\
             7.5 0 1 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n\
             8 inf 1 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n\
             9 0 NaN 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n\
             18446744073709551616 0 1 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n"
                .into(),
        ),
        (
            "crlf-tabs.swf",
            "; MaxProcs:\t8\r\n1\t0\t1\t1\t2\t-1\t-1\t2\t5\t-1\t1\t1\t1\t-1\t-1\t-1\t-1\t-1\r\n"
                .into(),
        ),
    ];
    let mut seeds: Vec<(String, Vec<u8>)> = text
        .iter()
        .map(|(name, t)| (name.to_string(), t.as_bytes().to_vec()))
        .collect();
    let mut latin1 = SAMPLE.as_bytes().to_vec();
    latin1.extend_from_slice(b"; Installation: Universit\xe4t\n");
    seeds.push(("not-utf8.swf".into(), latin1));
    seeds.push(("sample.swf.gz".into(), gzip(SAMPLE.as_bytes())));
    let (a, b) = ARCHIVE.split_at(ARCHIVE.len() / 2);
    let two = [gzip(a.as_bytes()), gzip(b.as_bytes())].concat();
    seeds.push(("archive-two-members.swf.gz".into(), two));
    gang_fuzz::write_seeds(TARGET, &seeds);
}
