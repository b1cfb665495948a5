//! The house rules of the workspace, as a newcomer meets them (issue "A house a newcomer can
//! live in"), checked on the source text of every crate:
//! - no source file over 600 lines;
//! - no function of a crate's own code (not its tests) over 100 lines;
//! - no folder of a crate with more than 15 source files directly in it;
//! - the README a front door under 250 lines, each crate's README under 300.
//!
//! What fails names each file, function or folder, and the limit.

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 100;
const MAX_FOLDER_FILES: usize = 15;
const MAX_README_LINES: usize = 250;
const MAX_CRATE_README_LINES: usize = 300;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn is_source(p: &Path) -> bool {
    p.extension()
        .is_some_and(|x| ["rs", "c", "h", "py", "sh"].contains(&&*x.to_string_lossy()))
}

/// Every source file of the crates and benches, as (path from the root, text).
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if is_source(&p) {
                out.push(p);
            }
        }
    }
    let mut files = vec![];
    walk(&root().join("crates"), &mut files);
    walk(&root().join("benches"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            (p.strip_prefix(root()).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// A file of tests through and through: a crate's `tests/`, `tests.rs`, a test kit, fuzz
/// tests, benches.
fn is_test_file(p: &Path) -> bool {
    p.components().any(|c| {
        let c = c.as_os_str().to_string_lossy();
        matches!(&*c, "tests" | "benches" | "fuzz_tests" | "examples")
    }) || p.file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n == "tests.rs" || n == "testkit.rs" || n.ends_with("_tests.rs") || n == "build.rs"
    })
}

/// Functions of `text` longer than the limit: (name, first line, lines). A function runs
/// from its `fn` line to the `}` at its own indentation; `#[cfg(test)]` blocks are tests.
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            w[0].trim_start().starts_with("#[cfg(test)]") && w[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    let mut found = vec![];
    let mut i = 0;
    while i < end {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let Some(name) = fn_name(line.trim_start()) else {
            i += 1;
            continue;
        };
        // The body opens where the signature ends; a declaration without one has none.
        let mut j = i;
        while j < end && !lines[j].trim_end().ends_with('{') && !lines[j].trim_end().ends_with(';')
        {
            j += 1;
        }
        if j >= end || lines[j].trim_end().ends_with(';') {
            i += 1;
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let mut k = j + 1;
        while k < end && !lines[k].starts_with(&close) {
            k += 1;
        }
        let n = k - i + 1;
        if n > MAX_FN_LINES {
            found.push((name, i + 1, n));
        }
        i += 1;
    }
    found
}

/// `name` of a line that starts a function (`pub(crate) async fn name(`), if it does.
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    if let Some(r) = rest.strip_prefix("pub(in ") {
        rest = r.split_once(") ")?.1;
        for prefix in ["const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|(_, t)| t.lines().count() > MAX_FILE_LINES)
        .map(|(p, t)| format!("{} has {} lines", p.display(), t.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_of_a_crates_own_code_is_over_100_lines() {
    let mut long = vec![];
    for (p, text) in sources() {
        if p.extension().is_none_or(|x| x != "rs") || is_test_file(&p) {
            continue;
        }
        for (name, line, n) in long_functions(&text) {
            long.push(format!("{}:{line} fn {name} has {n} lines", p.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_folder_of_a_crate_holds_more_than_15_source_files() {
    let mut count = std::collections::BTreeMap::<PathBuf, usize>::new();
    for (p, _) in sources() {
        *count.entry(p.parent().unwrap().to_path_buf()).or_default() += 1;
    }
    let full: Vec<String> = count
        .into_iter()
        .filter(|&(_, n)| n > MAX_FOLDER_FILES)
        .map(|(d, n)| format!("{} holds {n} source files", d.display()))
        .collect();
    assert!(
        full.is_empty(),
        "folders over {MAX_FOLDER_FILES} files:\n{}",
        full.join("\n")
    );
}

#[test]
fn the_readmes_are_short() {
    let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
    let front = lines(&root().join("README.md"));
    assert!(
        front < MAX_README_LINES,
        "README.md has {front} lines (under {MAX_README_LINES})"
    );
    let mut long = vec![];
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let readme = e.unwrap().path().join("README.md");
        if readme.is_file() && lines(&readme) >= MAX_CRATE_README_LINES {
            long.push(format!("{} has {} lines", readme.display(), lines(&readme)));
        }
    }
    assert!(
        long.is_empty(),
        "crate READMEs of {MAX_CRATE_README_LINES} lines or more:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_finder_finds_what_it_should() {
    let body = |n: usize| "    x();\n".repeat(n);
    let text = format!(
        "pub(crate) async fn long(a: u8) {{\n{}}}\n\nfn short() {{\n{}}}\n\nimpl X {{\n    pub(in crate::state) fn inner(\n        &self,\n    ) -> u8 {{\n{}    }}\n}}\n#[cfg(test)]\nmod tests {{\n    fn t() {{\n{}    }}\n}}\n",
        body(120),
        body(10),
        body(101),
        body(200)
    );
    let found: Vec<(String, usize)> = long_functions(&text)
        .into_iter()
        .map(|(n, _, l)| (n, l))
        .collect();
    assert_eq!(found, vec![("long".into(), 122), ("inner".into(), 105)]);
    assert_eq!(fn_name("fn main() {"), Some("main".into()));
    assert_eq!(fn_name("let f = 1;"), None);
}
