//! The master's pure state (`state/`, `job/`) and every module of the crate it imports,
//! followed through their `crate::` paths, use nothing of the daemon: no tokio, tonic,
//! prometheus or SQLite. And a job's state is written in one place, the transition table
//! (`job/transition.rs`).
//!
//! Read from the source text, as a newcomer would check it: a path written out in full
//! (`crate::x::y`, `use crate::{x, y}`) names the module `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DAEMON: [&str; 5] = ["tokio", "tonic", "prometheus_client", "rusqlite", "hyper"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Source files, but those that are tests through and through (`tests/`, `tests.rs`,
/// `testkit.rs`, `fuzz_tests/`): tests may use anything.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy();
        if matches!(&*name, "tests" | "tests.rs" | "testkit.rs" | "fuzz_tests") {
            continue;
        }
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The files of top-level module `name` (`src/name.rs`, or all of `src/name/`).
fn module_files(name: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    let dir = src().join(name);
    if dir.is_dir() {
        rust_files(&dir, &mut out);
    }
    let file = src().join(format!("{name}.rs"));
    if file.is_file() {
        out.push(file);
    }
    out
}

/// Source text without `//` comments and without `#[cfg(test)]` items (tests may use
/// anything): a one-line item (`mod testkit;`, a `use`) is left out, and a block (`mod
/// tests {`), by this crate's habit the end of its file, ends the text.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            match lines.next() {
                Some(item) if item.trim_end().ends_with(';') => continue,
                _ => break,
            }
        }
        let l = line.split("//").next().unwrap_or("");
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Top-level modules named through `crate::` in `text`.
fn crate_modules(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::{c, d}}`: the first segment of each item at depth 0.
            let mut depth = 0;
            let mut items = vec![String::new()];
            for c in group.chars() {
                match c {
                    '}' if depth == 0 => break,
                    ',' if depth == 0 => items.push(String::new()),
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 && c != ',' {
                    items.last_mut().unwrap().push(c);
                }
            }
            for item in items {
                let name = ident(item.trim_start());
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found
}

fn uses_daemon(text: &str) -> Option<&'static str> {
    DAEMON.into_iter().find(|d| {
        text.match_indices(d).any(|(i, _)| {
            let before = text[..i].chars().last();
            let after = text[i + d.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !word(before) && !word(after) && text[i + d.len()..].starts_with("::")
                || text[..i].trim_end().ends_with("use") && !word(after)
        })
    })
}

#[test]
fn the_pure_state_and_what_it_imports_use_nothing_of_the_daemon() {
    let mut seen: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut todo: Vec<(String, String)> = vec![
        ("state".into(), "the pure state".into()),
        ("job".into(), "the pure state".into()),
    ];
    let mut why: BTreeMap<String, String> = BTreeMap::new();
    while let Some((module, from)) = todo.pop() {
        if seen.contains_key(&module) {
            continue;
        }
        let files = module_files(&module);
        assert!(
            !files.is_empty(),
            "no source for crate::{module} (named by {from})"
        );
        why.insert(module.clone(), from);
        for f in &files {
            let text = code(&std::fs::read_to_string(f).unwrap());
            for next in crate_modules(&text) {
                if !seen.contains_key(&next) {
                    todo.push((next, module.clone()));
                }
            }
        }
        seen.insert(module, files);
    }
    let mut bad = vec![];
    for (module, files) in &seen {
        for f in files {
            let text = code(&std::fs::read_to_string(f).unwrap());
            if let Some(d) = uses_daemon(&text) {
                bad.push(format!(
                    "{} uses {d} (crate::{module}, imported by crate::{})",
                    f.strip_prefix(src()).unwrap().display(),
                    why[module]
                ));
            }
        }
    }
    let closure: Vec<&String> = seen.keys().collect();
    assert!(
        bad.is_empty(),
        "the pure state reaches the daemon:\n{}\n(modules reached: {closure:?})",
        bad.join("\n")
    );
    // The closure is what the state decides with, not the daemon's modules.
    for daemon in ["actor", "server", "service", "connections", "metrics"] {
        assert!(
            !seen.contains_key(daemon),
            "the pure state reaches crate::{daemon}"
        );
    }
}

#[test]
fn a_jobs_state_is_written_only_by_the_transition_table() {
    let mut files = vec![];
    rust_files(&src(), &mut files);
    let mut writes = vec![];
    for f in files {
        let rel = f.strip_prefix(src()).unwrap().to_path_buf();
        if rel == Path::new("job/transition.rs") {
            continue;
        }
        for (n, line) in std::fs::read_to_string(&f).unwrap().lines().enumerate() {
            let l = line.split("//").next().unwrap_or("");
            let assigns = l.match_indices(".state").any(|(i, _)| {
                let after = l[i + ".state".len()..].trim_start();
                after.starts_with('=') && !after.starts_with("==") && !after.starts_with("=>")
            });
            if assigns {
                writes.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        writes.is_empty(),
        "a job's state is changed only by JobRecord::move_to (job/transition.rs):\n{}",
        writes.join("\n")
    );
}

#[test]
fn the_checks_above_see_what_they_look_for() {
    assert_eq!(uses_daemon("use tokio::sync::mpsc;"), Some("tokio"));
    assert_eq!(
        uses_daemon("let s = tonic::Status::ok(\"\");"),
        Some("tonic")
    );
    assert_eq!(uses_daemon("// no tokio here\nlet tokio_like = 1;"), None);
    assert_eq!(
        crate_modules("use crate::{config::X, job::{A, B}};\nlet a = crate::msg_jobs::S;"),
        ["config", "job", "msg_jobs"].map(String::from).into()
    );
    assert_eq!(code("a\n#[cfg(test)]\nmod tests { use tokio; }"), "a\n");
    assert_eq!(code("#[cfg(test)]\nmod testkit;\nb // c\n"), "b \n");
}
