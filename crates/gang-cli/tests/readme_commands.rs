//! The README's commands cannot rot: every command in a code block of README.md is either
//! run here (the cheap ones: `--help`) or shown to be exactly what a named test runs (the
//! demo command by `demo.rs`, the test command by `.ci/run`, the tour's lines by
//! `demo/demo.sh`, which `demo.rs` runs). A command no test runs fails this test, named.
//! And every relative link of README.md, docs/*.md and benches/README.md leads to a file
//! of the repository (and, with a `#fragment` into a markdown file, to one of its headings).

use std::path::{Path, PathBuf};
use std::process::Command;

const PRUN: &str = env!("CARGO_BIN_EXE_prun");
const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The commands of `markdown`'s code blocks: one per line, `\` continuations joined,
/// comments (`#` at a line's start, or after two spaces) and blank lines left out.
fn code_block_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let code = match line.find("  #") {
            Some(i) => &line[..i],
            None => line,
        };
        let code = code.trim();
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        commands.push(std::mem::take(&mut pending));
    }
    assert!(!in_block, "README.md: a code block is not closed");
    commands
}

/// The string literals of the first `.args([...])` in `source`: what a test runs.
fn args_of(source: &str) -> Vec<String> {
    let start = source.find(".args([").expect("an .args([...]) call") + ".args([".len();
    let end = start + source[start..].find("])").expect("the end of .args([...])");
    source[start..end]
        .split(',')
        .map(|a| a.trim().trim_matches('"').to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// What `.ci/run` runs after its set-up lines, joined as a shell would chain them.
fn ci_command() -> String {
    read(".ci/run")
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with('#') && !l.starts_with("set ") && !l.starts_with("cd ")
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// How a README command is run by a test, or why it is not.
fn runner(command: &str) -> Result<String, String> {
    let demo_test = read("crates/gang-cli/tests/demo.rs");
    let demo_args = args_of(&demo_test).join(" ");
    let demo_command =
        format!("cargo build --release --workspace && ./target/release/gangctl {demo_args}");
    if command == demo_command {
        assert!(demo_args.ends_with("sh demo/demo.sh"), "{demo_args}");
        return Ok(
            "crates/gang-cli/tests/demo.rs runs `gangctl start` with these arguments".into(),
        );
    }
    if command == ci_command() {
        return Ok(".ci/run runs it".into());
    }
    if command == "./target/release/gangctl install" {
        return installs();
    }
    for (bin, path) in [("prun", PRUN), ("gangctl", GANGCTL)] {
        if command == format!("{bin} --help") {
            let o = Command::new(path).arg("--help").output().unwrap();
            assert!(o.status.success(), "{command}: {o:?}");
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("Usage"),
                "{command}: {o:?}"
            );
            return Ok("run here".into());
        }
    }
    let demo_script = read("demo/demo.sh");
    if demo_test.contains("\"demo/demo.sh\"")
        && demo_script
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains(command))
    {
        return Ok("demo/demo.sh runs it (crates/gang-cli/tests/demo.rs runs demo.sh)".into());
    }
    Err(format!(
        "README.md shows `{command}`, but no test runs it: run it in \
         crates/gang-cli/tests/readme_commands.rs, or make it a line of demo/demo.sh"
    ))
}

/// `gangctl install`, listed here without writing (as root it would write /usr/local);
/// `installed_docs.rs` installs for real, into a temporary prefix, and uses what it wrote.
fn installs() -> Result<String, String> {
    let o = Command::new(GANGCTL)
        .args(["install", "--dry-run"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "gangctl install --dry-run: {o:?}");
    for want in [
        "would install into",
        "  bin: prun gangctl",
        "  share/man/man1: prun.1",
    ] {
        assert!(out.contains(want), "{want} in {out}");
    }
    let test = read("crates/gang-cli/tests/installed_docs.rs");
    assert!(
        test.contains(".args([\"install\", \"--prefix\"])"),
        "installed_docs.rs installs"
    );
    Ok("run here with --dry-run; crates/gang-cli/tests/installed_docs.rs runs it into a temporary prefix".into())
}

#[test]
fn every_command_of_the_readme_is_run_by_a_test() {
    let readme = read("README.md");
    let commands = code_block_commands(&readme);
    assert!(commands.len() >= 2, "the README's commands: {commands:?}");
    // The two commands come first, as they are.
    assert_eq!(
        commands[..2],
        [
            "cargo build --release --workspace && ./target/release/gangctl start --mesh 4x4 -- sh demo/demo.sh",
            "sh scripts/setup-test-deps.sh && cargo test --workspace --locked",
        ]
    );
    let unrun: Vec<String> = commands.iter().filter_map(|c| runner(c).err()).collect();
    assert!(unrun.is_empty(), "{}", unrun.join("\n"));
}

#[test]
fn the_readme_stays_a_front_door() {
    let lines = read("README.md").lines().count();
    assert!(
        lines < 250,
        "README.md has {lines} lines; move prose to docs/"
    );
    // Every crate of the workspace is on the README's map.
    let readme = read("README.md");
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            readme.contains(&format!("(crates/{name}")),
            "README.md's crate map misses crates/{name}"
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a markdown file offers: its headings (outside code blocks) and `<a id>`s.
fn anchors(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
        for part in line.split("<a id=\"").skip(1) {
            out.extend(part.split('"').next().map(str::to_string));
        }
    }
    out
}

/// The targets of `](...)` links in `markdown`, outside code blocks.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        for part in line.split("](").skip(1) {
            out.extend(part.split(')').next().map(str::to_string));
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = root();
    let mut docs = vec![root.join("README.md"), root.join("benches/README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(path)
            };
            if !file.exists() {
                broken.push(format!("{name}: ({target}): no file {}", file.display()));
                continue;
            }
            if let Some(fragment) = fragment.filter(|_| file.extension().is_some_and(|e| e == "md"))
            {
                let there = std::fs::read_to_string(&file).unwrap();
                if !anchors(&there).iter().any(|a| a == fragment) {
                    broken.push(format!("{name}: ({target}): no heading #{fragment} there"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_commands_are_read_as_a_shell_would() {
    let md = "x\n```sh\na b   # c\n# d\n\ne \\\n  f\n```\n`g`\n";
    assert_eq!(code_block_commands(md), ["a b", "e f"]);
    assert_eq!(
        slug("The master's bad moments (\"x\", 10,000)"),
        "the-masters-bad-moments-x-10000"
    );
}
