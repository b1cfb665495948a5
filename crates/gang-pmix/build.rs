//! Link the OpenPMIx server library when pkg-config finds it (Debian: libpmix-dev), and
//! compile the C server (`src/server.c`) against it; otherwise build the crate's stand-in,
//! whose every call says PMIx is not built in. `GANG_NO_PMIX=1` forces the stand-in (to check that build).

/// What to watch so that installing (or removing) the library reruns this script: Debian's
/// package database changes with every install, and pkg-config's directories gain a `.pc`
/// file with the library wherever it came from. Without these, Cargo reruns a build script
/// only when the crate changes: a `cargo build` after `apt-get install libpmix-dev` kept
/// the agent without PMIx, and "install libpmix-dev and rebuild" did not work.
const WATCH: [&str; 6] = [
    "/var/lib/dpkg/status",
    "/usr/lib/x86_64-linux-gnu/pkgconfig",
    "/usr/lib/aarch64-linux-gnu/pkgconfig",
    "/usr/lib/pkgconfig",
    "/usr/share/pkgconfig",
    "/usr/local/lib/pkgconfig",
];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(gang_pmix)");
    println!("cargo::rerun-if-env-changed=GANG_NO_PMIX");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo::rerun-if-changed=src/server.c");
    // Only paths that exist: a missing one would make Cargo rerun this on every build.
    for path in WATCH.iter().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo::rerun-if-changed={path}");
    }
    if std::env::var_os("GANG_NO_PMIX").is_some_and(|v| v != "0") {
        println!("cargo::warning=GANG_NO_PMIX is set: the agent is built without PMIx");
        return;
    }
    let lib = match pkg_config::Config::new()
        .atleast_version("4.0")
        .probe("pmix")
    {
        Ok(lib) => lib,
        Err(e) => {
            // Not an error: the demo and everything but `--mpi pmix` build with the Rust
            // toolchain alone.
            println!(
                "cargo::warning=PMIx server library not found ({}); the agent is built without PMIx (install libpmix-dev and rebuild for `prun --mpi pmix`)",
                e.to_string().lines().next().unwrap_or("")
            );
            return;
        }
    };
    let mut build = cc::Build::new();
    build
        .file("src/server.c")
        .warnings(true)
        .extra_warnings(true);
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("gang_pmix_server");
    println!("cargo::rustc-cfg=gang_pmix");
}
