//! What ranks used, from their exit reports, in the job.

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::testkit::{World, config};

fn world(mpl: u32) -> World {
    World::new(config(4, 4, mpl))
}

/// What ranks used adds up in the job: CPU summed, the largest memory high-water mark
/// and its rank; a rank not measured counts for nothing (and is not counted measured).
#[test]
fn rank_usage_adds_up_in_the_job() {
    use crate::job::RankUsage;
    use crate::state::events::{ExitHow, RankExit};
    let mut w = run(world(1), &[RegisterAll, Submit("2x1"), Start(1)]);
    let used = [
        RankUsage {
            cpu_user_ns: Some(3_000),
            cpu_system_ns: Some(100),
            mem_peak_bytes: Some(5 << 20),
        },
        RankUsage::default(),
    ];
    for (rank, usage) in used.into_iter().enumerate() {
        let node = (rank as u32, 0);
        w.running
            .entry(node)
            .or_default()
            .remove(&(gang_core::JobId(1), rank as u32));
        let exit = RankExit {
            job: gang_core::JobId(1),
            rank: rank as u32,
            node,
            how: ExitHow::Code(0),
            abort: None,
            lost: vec![],
            usage,
        };
        w.step(|st, fx, now| crate::state::reactor::on_rank_exit(st, fx, now, exit));
    }
    let v = w.view(1);
    assert_eq!(v.state(), Completed);
    assert_eq!(
        (
            v.usage.ranks_measured,
            v.usage.cpu_user_ns,
            v.usage.cpu_system_ns
        ),
        (1, 3_000, 100)
    );
    assert_eq!((v.usage.max_rss_bytes, v.usage.max_rss_rank), (5 << 20, 0));
    // Saved with the job: a restarted master still has it.
    let w = w.restart();
    assert_eq!(w.view(1).usage.cpu_user_ns, 3_000);
}
