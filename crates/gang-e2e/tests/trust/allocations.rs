//! Allocations belong to their owner: another user's prun that names one (its
//! GANG_ALLOCATION_ID set by hand) is refused, naming the owner; the owner's own step runs
//! in it, as the owner.

use super::*;

#[test]
fn a_step_in_another_users_allocation_is_refused() {
    if !root() {
        return;
    }
    let mut accounts = Accounts::new();
    let a = accounts.user("sa", &[]);
    let b = accounts.user("sb", &[]);
    let sockets = socket_dir();
    let socket = sockets.path().join("master.sock");
    let c = cluster_with(2, 1, |o| o.socket = Some(socket.clone()));
    let out = as_user(
        &c,
        &a,
        "gangctl",
        &[
            "submit",
            "--parsable",
            "-N",
            "1",
            "-D",
            "/tmp",
            "-o",
            "/dev/null",
            "--wrap",
            "exec sleep 600",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let alloc: u64 = stdout(&out).trim().parse().expect("the allocation's id");
    wait_state(&c, alloc, "running", T);

    let step_as = |u: &TestUser, argv: &[&str]| {
        let mut cmd = command_as(&bin_dir().join("prun"), u);
        cmd.env("GANG_MASTER", c.master_addr())
            .env("GANG_ALLOCATION_ID", alloc.to_string())
            .current_dir("/tmp")
            .args(argv);
        output_within(&mut cmd, LIMIT)
    };
    let out = step_as(&b, &["-n", "1", "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "job {alloc} belongs to {}: {} may not start a step in it",
            a.name, b.name
        )),
        "{}",
        stderr(&out)
    );
    let j = gangctl_json(&c, &["job", &alloc.to_string()]).unwrap();
    assert!(j.get("step_ids").is_none(), "B's attempt left a step: {j}");

    let out = step_as(&a, &["--", "id", "-u"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), a.uid.to_string());
    let j = gangctl_json(&c, &["job", &alloc.to_string()]).unwrap();
    assert_eq!(j["step_ids"].as_array().map(Vec::len), Some(1), "{j}");

    let out = gangctl(&c, &["cancel", &alloc.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_state(&c, alloc, "cancelled", T);
}
