//! A cluster of four hosts comes up under systemd and runs a job across them.

use gang_e2e::prun;

use crate::hosts;

#[test]
fn four_hosts_boot_under_systemd_and_a_job_spans_them() {
    let c = hosts(2, 2, 4);
    for i in 0..5 {
        assert_eq!(
            c.systemctl(i, &["is-system-running"]).unwrap().trim(),
            "running"
        );
    }
    assert_eq!(
        c.unit_property(0, "gang-master.service", "ActiveState")
            .unwrap(),
        "active"
    );
    let out = prun(
        &c,
        &[
            "-n",
            "2x2",
            "--",
            "sh",
            "-c",
            "echo $(hostname) $(cat /etc/machine-id)",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut hosts: Vec<&str> = stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["host-1", "host-2", "host-3", "host-4"], "{stdout}");
    let mut ids: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every host its own machine-id: {stdout}");
    let dir = c.dir().to_path_buf();
    c.shutdown().unwrap();
    let _ = dir;
}

/// Every cgroup subtree of this process's harnesses that is still there.
fn our_cgroups(serial_prefix: &str) -> Vec<String> {
    let mut left = Vec::new();
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        if let Ok(d) = std::fs::read_dir(h.path()) {
            for e in d.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(serial_prefix) {
                    left.push(e.path().display().to_string());
                }
            }
        }
    }
    left
}

#[test]
fn a_teardown_leaves_no_process_cgroup_mount_or_namespace() {
    let c = hosts(2, 1, 2);
    let pids = c.pids();
    assert!(pids.len() > 10, "the hosts' processes: {pids:?}");
    let inits: Vec<u32> = (0..3).map(|i| c.init_pid(i)).collect();
    let netns: Vec<std::path::PathBuf> = inits
        .iter()
        .map(|p| std::fs::read_link(format!("/proc/{p}/ns/net")).unwrap())
        .collect();
    let dir = c.dir().to_path_buf();
    let prefix = c.cgroup_prefix();
    c.shutdown().unwrap();
    for p in &pids {
        assert!(!gang_e2e::alive(*p as i32), "process {p} outlived its host");
    }
    // None of its cgroup subtrees (other tests' harnesses have their own)...
    let left = our_cgroups(&prefix);
    assert!(left.is_empty(), "left over: {left:?}");
    // ...no mount of its directory in this namespace, no process in its namespaces.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.to_str().unwrap()), "{mounts}");
    assert!(!dir.exists(), "its temporary directory is removed");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(ns) = std::fs::read_link(entry.path().join("ns/net")) {
            assert!(
                !netns.contains(&ns),
                "{} is in a host's network",
                entry.path().display()
            );
        }
    }
}

#[test]
fn emulated_hosts_are_refused_to_other_users_with_the_reason() {
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .arg(gang_e2e::bin_dir().join("gangctl"))
        .args(["start", "--mesh", "2x1", "--hosts", "2", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("emulated hosts need root"), "{err}");
    // And a bad layout is refused before anything starts.
    let out = std::process::Command::new(gang_e2e::bin_dir().join("gangctl"))
        .args(["start", "--mesh", "2x1", "--hosts", "3", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("every host needs at least one node"), "{err}");
}

#[test]
fn gangctl_start_hosts_tears_everything_down_on_a_signal() {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(gang_e2e::bin_dir().join("gangctl"));
    cmd.args(["start", "--mesh", "2x1", "--hosts", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    gang_local::with_default_signals(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("export GANG_MASTER=unix:/proc/"), "{line}");
    let master_init: u32 = line
        .trim_start_matches("export GANG_MASTER=unix:/proc/")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(gang_e2e::alive(master_init as i32));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    // Without a command, stopping the cluster is what gangctl waits for: exit 0.
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(
        !gang_e2e::alive(master_init as i32),
        "the master's host outlived gangctl"
    );
    let left = our_cgroups(&format!("gang-host-{pid}-"));
    assert!(left.is_empty(), "{left:?}");
}
