//! The queue between users: one user's backlog does not hold up another user's job.

use super::*;
/// Finding: one user's 3,000 queued jobs made another user's 1-node job wait behind all
/// of them ("priority"). With fair share the other user's job is next, behind only the
/// job that runs when it arrives.
#[test]
fn a_backlog_of_one_user_does_not_hold_up_another() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let flood = accounts.user("fa", &[]);
    let other = accounts.user("fb", &[]);
    // Space sharing (the e2e default, --mpl 1): one job at a time on the one node.
    let (c, sockets) = shared_cluster(1, 1, |_| {});
    let socket = sockets.path().join("master.sock");
    const BACKLOG: usize = 40;
    let flooded: Vec<u64> = (0..BACKLOG)
        .map(|_| submit_as(&socket, &flood, &["sleep", "1"], "/"))
        .collect();
    let mine = submit_as(&socket, &other, &["true"], "/");
    gang_e2e::wait_state(&c, mine, "completed", Duration::from_secs(60));
    // When it is done, at most the flooder's job running at its submission (and the one
    // the master may have started in the same instant) has run.
    let done = flooded
        .iter()
        .filter(|&&id| gang_e2e::job(&c, id)["state"] == "completed")
        .count();
    assert!(
        done <= 2,
        "{done} of the flooder's {BACKLOG} jobs ran before the other user's"
    );
    for id in flooded {
        let _ = gang_e2e::gangctl(&c, &["cancel", &id.to_string()]);
    }
}
