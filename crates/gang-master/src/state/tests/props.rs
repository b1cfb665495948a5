//! Random event sequences through the reactor, the sanity check after every round (the
//! World runs it), and agents that obey what they are told.

use gang_core::JobId;
use proptest::prelude::*;

use crate::state::events::{ExitHow, LaunchFailure, RankExit};
use crate::state::reactor;
use crate::state::testkit::{World, caller, config, new_job};

#[derive(Debug, Clone)]
enum Op {
    Submit {
        w: u32,
        h: u32,
        limit: u64,
        uid: u32,
    },
    /// Confirm the pending launches of the i-th job that has some.
    Start(usize),
    LaunchFails(usize),
    /// A running rank (the i-th) exits with this code.
    Exit(usize, i32),
    Cancel(usize, u32),
    Wait(i64),
    Silence(usize),
    Register(usize),
    Drain(usize, bool),
    /// Agents carry out the signals they were sent: those ranks die.
    Obey,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=4, 1u32..=4, prop_oneof![Just(0u64), Just(1), Just(3)], 1000u32..=1001)
            .prop_map(|(w, h, limit, uid)| Op::Submit { w, h, limit, uid }),
        4 => (0usize..8).prop_map(Op::Start),
        1 => (0usize..8).prop_map(Op::LaunchFails),
        4 => (0usize..64, prop_oneof![3 => Just(0), 1 => Just(1)]).prop_map(|(i, c)| Op::Exit(i, c)),
        1 => (0usize..16, prop_oneof![Just(0u32), Just(1000), Just(1001)]).prop_map(|(i, u)| Op::Cancel(i, u)),
        2 => (1i64..1500).prop_map(Op::Wait),
        1 => (0usize..16).prop_map(Op::Silence),
        1 => (0usize..16).prop_map(Op::Register),
        1 => (0usize..16, any::<bool>()).prop_map(|(i, d)| Op::Drain(i, d)),
        3 => Just(Op::Obey),
        1 => Just(Op::Restart),
    ]
}

fn apply(mut w: World, op: Op) -> World {
    let nodes = w.nodes();
    match op {
        Op::Submit {
            w: ww,
            h,
            limit,
            uid,
        } => {
            let job = new_job(&format!("{ww}x{h}"), uid, limit);
            let _ = w.step(|st, fx, now| reactor::on_submit(st, fx, now, job));
        }
        Op::Start(i) | Op::LaunchFails(i) => {
            let mut jobs: Vec<JobId> = w.fx.launches().iter().map(|(_, o)| o.job).collect();
            jobs.dedup();
            if let Some(&job) = jobs.get(i % jobs.len().max(1)) {
                for (k, (node, o)) in w.fx.take_launches(job).into_iter().enumerate() {
                    if matches!(op, Op::LaunchFails(_)) && k == 0 {
                        let why = LaunchFailure::Refused("node: cannot start".into());
                        w.step(|st, fx, now| {
                            reactor::on_launched(st, fx, now, o.job, o.rank, Err(why))
                        });
                    } else {
                        w.started(node, &o);
                    }
                }
            }
        }
        Op::Exit(i, code) => {
            let ranks: Vec<_> = w
                .running
                .iter()
                .filter(|(n, _)| !w.silent.contains(n))
                .flat_map(|(n, rs)| rs.iter().map(move |r| (*n, *r)))
                .collect();
            if let Some(&(node, (job, rank))) = ranks.get(i % ranks.len().max(1)) {
                exit(&mut w, node, job, rank, ExitHow::Code(code));
            }
        }
        Op::Cancel(i, uid) => {
            let ids: Vec<JobId> =
                w.st.list_for(&caller(0), &Default::default(), w.now)
                    .views
                    .iter()
                    .map(|j| j.id)
                    .collect();
            if let Some(&job) = ids.get(i % ids.len().max(1)) {
                let by = caller(uid);
                let _ = w.step(|st, fx, now| reactor::on_cancel(st, fx, now, job, &by));
            }
        }
        Op::Wait(ms) => w.tick_after_ms(ms),
        Op::Silence(i) => {
            w.silent.insert(nodes[i % nodes.len()]);
        }
        Op::Register(i) => {
            let node = nodes[i % nodes.len()];
            for job in w.register(node) {
                // The agent kills what it is told to.
                if let Some(rs) = w.running.get_mut(&node) {
                    rs.retain(|(j, _)| *j != job);
                }
            }
        }
        Op::Drain(i, d) => {
            let node = nodes[i % nodes.len()];
            let admin = caller(0);
            w.step(|st, fx, now| reactor::on_set_drained(st, fx, now, node, d, &admin))
                .expect("a node of the mesh");
        }
        Op::Obey => {
            for (node, job, _) in w.fx.take_every_signal() {
                if w.silent.contains(&node) {
                    continue;
                }
                let ranks: Vec<_> = w
                    .running
                    .get(&node)
                    .into_iter()
                    .flatten()
                    .filter(|(j, _)| *j == job)
                    .copied()
                    .collect();
                for (job, rank) in ranks {
                    exit(&mut w, node, job, rank, ExitHow::Signal(15));
                }
            }
        }
        Op::Restart => {
            w.fx.sent.clear();
            w = w.restart();
        }
    }
    w
}

fn exit(w: &mut World, node: (u32, u32), job: JobId, rank: u32, how: ExitHow) {
    if let Some(rs) = w.running.get_mut(&node) {
        rs.remove(&(job, rank));
    }
    let exit = RankExit {
        job,
        rank,
        node,
        how,
        abort: None,
        lost: vec![],
        usage: Default::default(),
    };
    w.step(|st, fx, now| reactor::on_rank_exit(st, fx, now, exit));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_events_keep_the_master_sane(mpl in 1u32..=3, ops in prop::collection::vec(op(), 1..80)) {
        let mut w = World::new(config(4, 4, mpl));
        w.register_all();
        for op in ops {
            w = apply(w, op);
        }
        // Whatever happened, every saved job is one the master knows, in the same state.
        for (id, rec) in &w.fx.db {
            let view = w.st.view(JobId(*id), w.now).expect("saved jobs are known");
            prop_assert_eq!(view.state(), rec.state());
        }
    }
}
