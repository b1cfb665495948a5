//! Emulated hosts (gang-local's `hosts`): separate network, mount, UTS, IPC, PID and
//! cgroup namespaces with systemd as PID 1, the master and the agents run by the units
//! in `deploy/`. What one host pretending to be a mesh could not show.

use std::time::Duration;

use gang_local::hosts::{EmulatedHosts, HostsOptions};

mod basics;

/// Boot `hosts` hosts for a `w`x`h` mesh, the binaries of this build installed.
pub fn hosts(w: u32, h: u32, hosts: u32) -> EmulatedHosts {
    let opts = HostsOptions {
        hosts,
        bin_dir: Some(gang_e2e::bin_dir()),
        boot_timeout: Duration::from_secs(120),
        ..HostsOptions::default()
    };
    EmulatedHosts::start((w, h), opts).expect("emulated hosts boot")
}

/// Run `prun ARGS` against the hosts' master from this machine.
pub fn prun(c: &EmulatedHosts, args: &[&str]) -> std::process::Output {
    std::process::Command::new(gang_e2e::bin_dir().join("prun"))
        .args(args)
        .env("GANG_MASTER", c.master_addr())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("prun runs")
}
