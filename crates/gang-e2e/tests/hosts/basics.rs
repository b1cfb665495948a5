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
