//! Builds the interposition library once per MPI implementation, with that
//! implementation's own compiler wrapper: MPICH and Open MPI differ in ABI (handle types,
//! `MPI_Status`, constants), so one build cannot serve both. A wrapper that is absent is
//! skipped with a warning; the agent then refuses `--mpi-check` for that implementation,
//! naming what is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: [&str; 5] = ["page.c", "p2p.c", "wait.c", "coll.c", "requests.c"];
const DPKG_STATUS: &str = "/var/lib/dpkg/status";

fn main() {
    let csrc = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-env-changed=GANG_MPICC_MPICH");
    println!("cargo:rerun-if-env-changed=GANG_MPICC_OPENMPI");
    println!("cargo:rerun-if-env-changed=PATH");
    // Installing MPICH or Open MPI must rerun this, or the agent keeps refusing
    // --mpi-check after the packages came: Debian's package database changes with every
    // install (only watched where it exists: a missing path reruns every build).
    if Path::new(DPKG_STATUS).exists() {
        println!("cargo:rerun-if-changed={DPKG_STATUS}");
    }
    println!("cargo:rustc-check-cfg=cfg(gang_mpi_check_mpich)");
    println!("cargo:rustc-check-cfg=cfg(gang_mpi_check_openmpi)");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for (name, default_cc, var) in [
        ("mpich", "mpicc.mpich", "GANG_MPICC_MPICH"),
        ("openmpi", "mpicc.openmpi", "GANG_MPICC_OPENMPI"),
    ] {
        let cc = std::env::var(var).unwrap_or_else(|_| default_cc.to_string());
        let lib = out.join(format!("libgang_mpi_check_{name}.so"));
        let mut cmd = Command::new(&cc);
        cmd.args([
            "-shared", "-fPIC", "-O2", "-g0", "-Wall", "-Wextra", "-Werror",
        ])
        .arg("-o")
        .arg(&lib);
        for s in SOURCES {
            cmd.arg(csrc.join(s));
        }
        match cmd.output() {
            Ok(o) if o.status.success() => {
                println!("cargo:rustc-cfg=gang_mpi_check_{name}");
            }
            Ok(o) => panic!(
                "{cc} failed to build the {name} checking library:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => println!(
                "cargo:warning=gang-mpi-check: {cc} not found ({e}): the agent will refuse --mpi-check for {name} jobs (sh scripts/setup-test-deps.sh installs it)"
            ),
        }
    }
}
