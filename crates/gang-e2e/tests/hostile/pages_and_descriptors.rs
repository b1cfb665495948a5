//! What the agent shares with a rank in memory and descriptors: the state page (which
//! the agent reads at every heartbeat and switch) and whatever the agent itself
//! inherited.

use super::*;

/// Finding: `truncate -s 0 $GANG_MSG_DIR/state.page` killed the root agent with SIGBUS
/// within a second (it mapped a file the rank's user owned). The page is now sealed
/// memory: neither the old path nor the inherited descriptor can change its size.
#[test]
fn a_rank_cannot_shrink_its_state_page_under_the_agent() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("pg", &[]);
    let (mut c, _sockets) = shared_cluster(1, 1, |_| {});
    let agent = c.agent_pid(0, 0).expect("the agent runs");
    // Every way the user has at the page: the file the agent used to map, and the
    // descriptor it now passes (opened anew through /proc, then shrunk and grown).
    let attack = r#"
        truncate -s 0 "$GANG_MSG_DIR/state.page" 2>/dev/null
        if truncate -s 0 "/proc/$$/fd/$GANG_STATE_FD"; then echo shrunk; fi
        if truncate -s 1G "/proc/$$/fd/$GANG_STATE_FD"; then echo grown; fi
        sleep 2
        echo still here
    "#;
    let out = as_user(&c, &mallory, "prun", &["-n", "1", "--", "sh", "-c", attack]);
    assert_eq!(stdout(&out), "still here\n", "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Operation not permitted"),
        "the seals refuse the size change: {}",
        stderr(&out)
    );
    // The agent is the same process, and still runs the next job.
    assert_agent_carries_on(&mut c, agent, &mallory);
}

/// Finding: ranks inherited descriptors the agent had inherited from whatever started it
/// (fd 10 and a pipe's write end from the shell). A rank now holds its stdio and what
/// the agent gives it (the state page; PMI's socket for MPICH programs), nothing else.
#[test]
fn a_rank_inherits_no_descriptor_of_the_agent() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("fd", &[]);
    // A pipe without close-on-exec, as a shell leaves them: the daemons inherit it.
    let mut fds = [-1; 2];
    // SAFETY: pipe writes two new descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (c, _sockets) = shared_cluster(1, 1, |_| {});
    // SAFETY: ours, closed once; the daemons have their copies.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    // find, a child of the shell, lists the shell's descriptors: a command
    // substitution would open a pipe in the shell while it looks.
    let list = r#"find /proc/$$/fd -mindepth 1 -printf '%f %l
'"#;
    let out = as_user(
        &c,
        &mallory,
        "prun",
        &["-n", "1", "--mpi", "none", "--", "sh", "-c", list],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let extra: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| !matches!(l.split(' ').next(), Some("0" | "1" | "2")))
        .map(str::to_string)
        .collect();
    assert_eq!(extra.len(), 1, "only the state page: {extra:?}");
    assert!(
        extra[0].contains("memfd:gang-state-page"),
        "only the state page: {extra:?}"
    );
}
