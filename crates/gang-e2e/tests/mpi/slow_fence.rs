//! A PMI barrier waits as long as its slowest rank: rank 1 arrives 8 s after the others
//! (past the 5 s every call from an agent to the master may take), and every rank still
//! leaves the barrier with every rank's put. Before the fix, the waiting ranks' barrier
//! failed when their agents' calls timed out.

use gang_e2e::*;

/// A PMI-1 client in sh on the rank's `PMI_FD` (9): init, put, barrier, get rank 1's put.
const CLIENT: &str = r#"
pmi() { printf '%s\n' "$1" >&9; read -r reply <&9; }
pmi 'cmd=init pmi_version=1 pmi_subversion=1'
pmi 'cmd=get_my_kvsname'; kvs=${reply##*kvsname=}
[ "$GANG_RANK" = 1 ] && sleep 8
pmi "cmd=put kvsname=$kvs key=k$GANG_RANK value=v$GANG_RANK"
pmi 'cmd=barrier_in'; echo "rank $GANG_RANK: $reply"
pmi "cmd=get kvsname=$kvs key=k1"; echo "rank $GANG_RANK: $reply"
pmi 'cmd=finalize'
"#;

#[test]
fn a_barrier_waits_for_a_rank_that_arrives_seconds_after_the_others() {
    let c = cluster(2, 1, &[]);
    let out = prun(
        &c,
        &["-n", "2x1", "--mpi", "pmi1", "--", "sh", "-c", CLIENT],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}: cmd=barrier_out rc=0")),
            "rank {r}:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains(&format!("rank {r}: cmd=get_result rc=0 value=v1")),
            "rank {r}:\n{stdout}\n{stderr}"
        );
    }
}
