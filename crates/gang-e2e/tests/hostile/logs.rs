//! What the daemons write down (every job's argv and working directory) is for whoever
//! runs the cluster.

use super::*;
use std::os::unix::fs::MetadataExt;

/// Finding: a local cluster's logs were 0644, so any user read every other user's
/// command lines and directories. They are 0600 now, even in a directory others may
/// traverse (where the master's socket is).
#[test]
fn another_user_cannot_read_the_daemons_logs() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("lg", &[]);
    let (c, _sockets) = shared_cluster(1, 1, |_| {});
    // The directory as open as it could be made: only the files' modes protect them.
    std::fs::set_permissions(c.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_user(
        &c,
        &mallory,
        "prun",
        &["-n", "1", "--", "echo", "secret-argv"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for log in [c.master_log(), c.agent_log(0, 0)] {
        let mode = std::fs::metadata(&log).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", log.display());
        let mut cat = command_as(std::path::Path::new("/bin/cat"), &mallory);
        cat.arg(&log);
        let out = output_within(&mut cat, LIMIT);
        assert!(!out.status.success(), "{} was readable", log.display());
        assert!(
            stderr(&out).contains("Permission denied"),
            "{}",
            stderr(&out)
        );
    }
}
