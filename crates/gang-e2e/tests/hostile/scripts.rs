//! Another user's batch script, from a shell on the node it runs on: its text (secrets
//! and all) is in no command line anyone can list, and its spooled file is its user's
//! alone.

use super::*;

/// A's `gangctl submit` of a script holding a secret; while it runs, B lists every
/// process's command line (`ps`, /proc/*/cmdline) and tries the spooled file: the secret
/// is nowhere, the file is A's (0500) and refused to B; A's job runs the script whole.
#[test]
fn a_batch_script_is_in_no_command_line_and_its_file_is_its_users_alone() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let alice = accounts.user("sa", &[]);
    let bob = accounts.user("sb", &[]);
    let (c, _sockets) = shared_cluster(1, 1, |_| {});
    let secret = format!("s3cr3t-{}", std::process::id());
    let script = alice.home.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#GANG -n 1\nTOKEN={secret}\necho \"script at $0\"\nsleep 6\necho done ${{#TOKEN}}\n"
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&script, Some(alice.uid), Some(alice.gid)).unwrap();
    let out = as_user(
        &c,
        &alice,
        "gangctl",
        &["submit", "--parsable", script.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    gang_e2e::wait_state(&c, id.parse().unwrap(), "running", LIMIT);
    let path = gang_e2e::wait_for(LIMIT, "the script to say where it is", || {
        let o = std::fs::read_to_string(alice.home.join(format!("gang-{id}.out"))).ok()?;
        o.lines()
            .find_map(|l| l.strip_prefix("script at "))
            .map(str::to_string)
    });
    // B, on the node: every command line, and the file.
    let look = format!(
        "ps -eo args; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; \
         cat '{path}' && echo READ-$((40 + 2))"
    );
    let mut sh = accounts::command_as(std::path::Path::new("/bin/sh"), &bob);
    sh.args(["-c", &look]);
    let seen = accounts::output_within(&mut sh, LIMIT);
    let said = stdout(&seen);
    assert!(
        !said.contains(&secret),
        "the secret in a command line: {said}"
    );
    // (Its own command line shows the sum, not what it makes.)
    assert!(!said.contains("READ-42"), "B read A's script");
    assert!(said.lines().count() > 10, "B saw the processes: {said}");
    let meta = std::fs::metadata(&path).expect("the spooled script");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (alice.uid, 0o500),
        "{path}"
    );
    let done = gang_e2e::wait_state(&c, id.parse().unwrap(), "completed", LIMIT);
    assert_eq!(done["exit_code"], 0, "{done}");
    let out = std::fs::read_to_string(alice.home.join(format!("gang-{id}.out"))).unwrap();
    assert!(out.ends_with(&format!("done {}\n", secret.len())), "{out}");
    assert!(
        !std::path::Path::new(&path).exists(),
        "the script's file outlived its rank"
    );
}
