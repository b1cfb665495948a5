//! What the agent looks up for a launch (working directory, program, what it links) is
//! looked up as the submitting user: an answer must not tell them what exists where they
//! may not look.

use super::*;

/// Finding: the agent checked a job's working directory as root, so `/root/nonexistent`
/// failed with "No such file" and `/root` with "Permission denied": any user could probe
/// root's home (or anyone's) for names. Both now fail the same way, as the user's own
/// `cd` would.
#[test]
fn a_working_directory_the_user_may_not_enter_reveals_nothing() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("pa", &[]);
    let (c, sockets) = shared_cluster(1, 1, |_| {});
    // Root's private directory, with something in it.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let there = private.path().join("there");
    std::fs::create_dir(&there).unwrap();
    let missing = private.path().join("missing");
    let socket = sockets.path().join("master.sock");
    let mut reasons = Vec::new();
    for cwd in [&there, &missing] {
        let id = submit_as(&socket, &mallory, &["true"], &cwd.display().to_string());
        let job = gang_e2e::wait_state(&c, id, "failed", Duration::from_secs(30));
        let reason = job["reason"].as_str().unwrap().to_string();
        reasons.push(reason.replace(&cwd.display().to_string(), "DIR"));
    }
    assert_eq!(reasons[0], reasons[1], "the two failures differ");
    assert!(reasons[0].contains("Permission denied"), "{}", reasons[0]);
}

/// The same for output files (`prun -o`): their directory was checked as the agent, so a
/// directory that exists in root's private one and one that does not failed differently.
/// Now both fail as the user's own look would: permission denied.
#[test]
fn an_output_directory_the_user_may_not_enter_reveals_nothing() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("po", &[]);
    let (c, _sockets) = shared_cluster(1, 1, |_| {});
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(private.path().join("there")).unwrap();
    let mut said = Vec::new();
    for dir in ["there", "missing"] {
        let pattern = private.path().join(dir).join("x.out");
        let out = as_user(
            &c,
            &mallory,
            "prun",
            &["-n", "1", "-o", pattern.to_str().unwrap(), "--", "true"],
        );
        assert!(!out.status.success(), "{}", stdout(&out));
        // The same words but for the directory's name and the job's id.
        let err = stderr(&out)
            .replace(&private.path().join(dir).display().to_string(), "DIR")
            .split_once(" failed: ")
            .map(|(_, why)| why.to_string())
            .unwrap_or_default();
        said.push(err);
    }
    assert_eq!(said[0], said[1], "the two failures differ");
    assert!(said[0].contains("Permission denied"), "{}", said[0]);
}
