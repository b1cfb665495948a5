//! Answers that come together (a relayed launch's outcome, a subtree's exit reports) are
//! taken as one change of the job: a 10,000-rank job saved, viewed and walked once a rank
//! made the master's work quadratic in its ranks.

use gang_core::JobId;

use super::S::*;
use super::run;
use crate::job::State::*;
use crate::state::effects::Effect;
use crate::state::events::{ExitHow, RankExit};
use crate::state::reactor;
use crate::state::testkit::{World, config, new_job};

/// The views of job 1 that watchers were sent, taken out of the recorder.
fn views_sent(w: &mut World) -> usize {
    let before = w.fx.sent.len();
    w.fx.sent
        .retain(|e| !matches!(e, Effect::JobChanged(v) if v.id == JobId(1)));
    before - w.fx.sent.len()
}

/// A whole 8x8 job's launches answered in one batch run it; its 64 exits reported in one
/// batch (one of them failed) end it as Failed with that rank's code: each batch is one
/// or two views to watchers (its change, then its end), where it was one a rank.
#[test]
fn a_batch_of_answers_or_exits_changes_the_job_once() {
    let mut w = run(World::new(config(8, 8, 1)), &[RegisterAll]);
    w.step(|st, fx, now| reactor::on_submit(st, fx, now, new_job("8x8", 1000, 0)))
        .expect("8x8 fits");
    let launches = w.fx.take_launches(JobId(1));
    assert_eq!(launches.len(), 64);
    views_sent(&mut w);
    let results: Vec<_> = launches
        .iter()
        .map(|(_, o)| (o.rank, Ok(100 + o.rank)))
        .collect();
    for (node, o) in &launches {
        w.running
            .entry(*node)
            .or_default()
            .insert((JobId(1), o.rank));
    }
    w.step(|st, fx, now| reactor::on_launches(st, fx, now, JobId(1), &results));
    assert_eq!(w.view(1).state(), Running);
    assert_eq!(
        views_sent(&mut w),
        1,
        "one view for 64 launches answered together"
    );

    let exits: Vec<RankExit> = launches
        .iter()
        .map(|(node, o)| RankExit {
            job: JobId(1),
            rank: o.rank,
            node: *node,
            how: ExitHow::Code(if o.rank == 5 { 3 } else { 0 }),
            abort: None,
            lost: vec![],
            usage: Default::default(),
        })
        .collect();
    w.running.clear();
    w.step(|st, fx, now| reactor::on_rank_exits(st, fx, now, exits));
    let v = w.view(1);
    assert_eq!((v.state(), v.exit_code), (Failed, Some(3)), "{v:?}");
    assert!(v.reason.contains("rank 5"), "{}", v.reason);
    assert_eq!(v.ranks_done, 64);
    let views = views_sent(&mut w);
    assert!(views <= 2, "{views} views for 64 exits reported together");
    // Saved as it ended: a restarted master has it ended too.
    let w = w.restart();
    assert_eq!(w.view(1).state(), Failed);
}

/// Reports that name a rank twice, or a rank of another node, change nothing twice: the
/// batch is taken rank by rank, as single reports are.
#[test]
fn a_batch_with_repeats_and_strangers_counts_each_rank_once() {
    let mut w = run(
        World::new(config(4, 1, 1)),
        &[RegisterAll, Submit("4x1"), Start(1)],
    );
    let exit = |rank: u32, node: (u32, u32)| RankExit {
        job: JobId(1),
        rank,
        node,
        how: ExitHow::Code(0),
        abort: None,
        lost: vec![],
        usage: Default::default(),
    };
    // Rank 0 twice, rank 1 from node (3,0) where it does not run.
    let exits = vec![exit(0, (0, 0)), exit(0, (0, 0)), exit(1, (3, 0))];
    w.step(|st, fx, now| reactor::on_rank_exits(st, fx, now, exits));
    let v = w.view(1);
    assert_eq!((v.state(), v.ranks_done), (Running, 1), "{v:?}");
    let rest = vec![exit(1, (1, 0)), exit(2, (2, 0)), exit(3, (3, 0))];
    w.step(|st, fx, now| reactor::on_rank_exits(st, fx, now, rest));
    assert_eq!(w.view(1).state(), Completed);
}
