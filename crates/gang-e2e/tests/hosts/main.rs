//! Emulated hosts (gang-local's `hosts`): separate network, mount, UTS, IPC, PID and
//! cgroup namespaces with systemd as PID 1, the master and the agents run by the units
//! in `deploy/`. What one host pretending to be a mesh could not show.

use std::time::Duration;

use gang_local::hosts::{EmulatedHosts, HostsOptions};

mod basics;
mod faults;
mod systemd;

/// Boot `hosts` hosts for a `w`x`h` mesh, the binaries of this build installed.
pub fn hosts(w: u32, h: u32, hosts: u32) -> EmulatedHosts {
    hosts_with(w, h, hosts, HostsOptions::default())
}

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
