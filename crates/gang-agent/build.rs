//! Build the PMI progress library (`preload/pmi_progress.c`, see `pmi::progress_preload`) as a
//! shared object in OUT_DIR: the agent embeds it and preloads it into the ranks it serves
//! the simple PMI protocol. Plain C with no headers but libc's: the C compiler Rust links
//! with is all it needs.

fn main() {
    println!("cargo::rerun-if-changed=preload/pmi_progress.c");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let so = out.join("libgang_pmi_progress.so");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg("preload/pmi_progress.c")
        .args(["-ldl", "-lpthread"])
        .status()
        .expect("the C compiler runs");
    assert!(status.success(), "building preload/pmi_progress.c failed");
}
