//! Fuzz target `target`: master addresses as clients take them (`--master`, `GANG_MASTER`,
//! the client config). See crates/gang-fuzz/README.md.

use gang_proto::client::Target;
use proptest::prelude::*;
use tonic::transport::Endpoint;

const TARGET: &str = "target";

fn check(text: String) -> Result<u64, TestCaseError> {
    let t = match Target::parse(&text) {
        Ok(t) => t,
        Err(e) => {
            prop_assert!(!e.trim().is_empty(), "a refusal says why");
            return Ok(1);
        }
    };
    // Printed (as the CLI names the master in its errors), it parses to the same target.
    prop_assert_eq!(Target::parse(&t.to_string()), Ok(t.clone()));
    let given = text.trim();
    match &t {
        Target::Unix(_) => prop_assert!(given.starts_with("unix:") || given.starts_with('/')),
        Target::Tls(uri) => {
            prop_assert!(
                !given.starts_with("http://"),
                "plain HTTP accepted: {given:?}"
            );
            let hostport = uri.strip_prefix("https://").expect("TLS targets are https");
            prop_assert!(!hostport.is_empty() && !hostport.contains("://"));
            // What the client does with it next; a bad URI is an error there, not a panic.
            let _ = Endpoint::from_shared(uri.clone());
        }
    }
    Ok(1)
}

#[test]
fn fuzz_target() {
    gang_fuzz::run(
        TARGET,
        1000,
        gang_fuzz::text(gang_fuzz::seeds(TARGET)),
        check,
    );
}

/// Regenerate the seeds: `cargo test -p gang-proto --test fuzz -- --ignored`.
#[test]
#[ignore = "writes crates/gang-fuzz/corpus/target"]
fn write_fuzz_corpus() {
    let seeds = [
        ("unix", "unix:/run/gang/master.sock"),
        ("unix-empty", "unix:"),
        ("path", "/tmp/m.sock"),
        ("hostport", "10.0.0.1:7470"),
        ("https-spaced", " https://h:1 "),
        ("https-v6", "https://[::1]:7470"),
        ("name", "master.example.org:7470"),
        ("http", "http://h:1"),
        ("https-bare", "https://"),
        ("nested-scheme", "https://a://b"),
        ("empty", ""),
    ];
    let seeds: Vec<(String, Vec<u8>)> = seeds
        .iter()
        .map(|(name, text)| (format!("{name}.txt"), text.as_bytes().to_vec()))
        .collect();
    gang_fuzz::write_seeds(TARGET, &seeds);
}
