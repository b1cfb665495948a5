//! Emulated hosts (gang-local's `hosts`): separate network, mount, UTS, IPC, PID and
//! cgroup namespaces with systemd as PID 1, the master and the agents run by the units
//! in `deploy/`. What one host pretending to be a mesh could not show.

use std::time::Duration;

use gang_local::hosts::{EmulatedHosts, HostsOptions, ImageOptions};

mod basics;
mod clocks;
mod faults;
mod mpi;
mod ranks;
mod soak;
mod systemd;

// The messaging tests' reading of the kernel's socket queues of stopped ranks.
#[allow(dead_code)]
#[path = "../../../gang-msg/tests/common/wire.rs"]
mod wire;

// The MPI test programs (C), built by the tests with each MPI's compiler wrapper.
#[allow(dead_code)]
#[path = "../mpi/programs.rs"]
mod programs;

/// Boot `hosts` hosts for a `w`x`h` mesh, the binaries of this build installed.
pub fn hosts(w: u32, h: u32, hosts: u32) -> EmulatedHosts {
    hosts_with(w, h, hosts, HostsOptions::default())
}

/// [`hosts`] with master keys set over deploy/master.toml's (`quantum_ms = 10`, ...).
pub fn hosts_keys(
    w: u32,
    h: u32,
    hosts: u32,
    master_keys: Vec<(String, toml::Value)>,
) -> EmulatedHosts {
    let opts = HostsOptions {
        image: ImageOptions {
            allow_root_jobs: nix::unistd::geteuid().is_root(),
            master_keys,
        },
        ..HostsOptions::default()
    };
    hosts_with(w, h, hosts, opts)
}

/// [`hosts`] with other options.
pub fn hosts_with(w: u32, h: u32, hosts: u32, opts: HostsOptions) -> EmulatedHosts {
    let opts = HostsOptions {
        hosts,
        bin_dir: Some(gang_e2e::bin_dir()),
        boot_timeout: Duration::from_secs(120),
        ..opts
    };
    EmulatedHosts::start((w, h), opts).expect("emulated hosts boot")
}

/// `sh -c SCRIPT` on host `i`: its stdout (it must succeed).
pub fn on_host(c: &EmulatedHosts, i: usize, script: &str) -> String {
    let out = c.exec(i, &["sh", "-c", script]).unwrap();
    assert!(
        out.status.success(),
        "`{script}` on {}: {}",
        c.name(i),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `prun ARGS` against the hosts' master from this machine.
pub fn prun(c: &EmulatedHosts, args: &[&str]) -> std::process::Output {
    prun_env(c, args, &[])
}

/// [`prun`] with more environment (which prun hands to the job).
pub fn prun_env(c: &EmulatedHosts, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(gang_e2e::bin_dir().join("prun"))
        .args(args)
        .envs(env.iter().copied())
        .env("GANG_MASTER", c.master_addr())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("prun runs")
}

/// `gangctl --output json ARGS` against the hosts' master, parsed.
pub fn gangctl_json(c: &EmulatedHosts, args: &[&str]) -> serde_json::Value {
    gang_e2e::gangctl_json(c, args).unwrap_or_else(|e| panic!("{e:#}"))
}

/// A fresh directory every host sees at the same path: under the build's target
/// directory (the hosts have their own /tmp, /run, /var and /dev/shm).
pub fn shared_dir(prefix: &str) -> tempfile::TempDir {
    let base = gang_e2e::bin_dir().join("hosts-shared");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&base)
        .unwrap()
}

pub fn ok(out: &std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
