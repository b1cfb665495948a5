//! The C mirror of the state page (`csrc/state_page.h`) against gang-msg's Rust layout:
//! a C program prints each field's offset, and every one must match.

use std::process::Command;

#[test]
fn c_layout_matches_gang_msg() {
    let (fields, size) = gang_msg::abi::state_layout();
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"state_page.h\"\nint main(void) {\n",
    );
    for (name, _) in &fields {
        src.push_str(&format!(
            "    printf(\"{name} %zu\\n\", offsetof(struct gang_state_page, {name}));\n"
        ));
    }
    src.push_str(
        "    printf(\"size %zu\\n\", sizeof(struct gang_state_page));\n    return 0;\n}\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("offsets.c");
    let exe = dir.path().join("offsets");
    std::fs::write(&c, src).unwrap();
    let csrc = concat!(env!("CARGO_MANIFEST_DIR"), "/csrc");
    let out = Command::new("cc")
        .args(["-std=c11", "-I", csrc, "-o"])
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut want: Vec<String> = fields.iter().map(|(n, o)| format!("{n} {o}")).collect();
    want.push(format!("size {size}"));
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}

#[test]
fn c_magic_is_gang_msgs() {
    let header = include_str!("../csrc/state_page.h");
    let want = format!("0x{:016x}ULL", gang_msg::abi::STATE_MAGIC);
    assert!(header.contains(&want), "state_page.h lacks {want}");
}
