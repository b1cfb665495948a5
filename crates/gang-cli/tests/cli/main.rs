//! The real `prun` and `gangctl` binaries on the error paths that need no cluster.
//!
//! End-to-end tests against a running cluster need `gang-master` and `gang-agent` built in
//! the same target directory (see the `gang-local` crate); these do not.

mod gangctl;
mod help;
mod prun;

use std::path::Path;
use std::process::{Command, Output, Stdio};

const PRUN: &str = env!("CARGO_BIN_EXE_prun");
const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

/// Run a binary with no GANG_* settings from the environment and stdin on /dev/null.
fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("GANG_MASTER")
        .env_remove("GANG_OUTPUT")
        .env("GANG_CONFIG", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
