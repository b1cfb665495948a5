//! Builds the emulated hosts' clock library (csrc/clockshift.c) as a shared object, which
//! the crate embeds (hosts/clock.rs writes it into each host's directory).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc/clockshift.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("libgang_clockshift.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-shared", "-fPIC", "-O2", "-g0", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(status.success(), "{cc} could not build {}", src.display());
}
