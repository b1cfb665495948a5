//! The reactor, table-driven: each case is a list of steps and expectations run through
//! the recording port, one round per step, with the sanity check after every round.

mod batches;
mod cases;
mod liveness;
mod messaging;
mod policy;
mod props;
mod requests;
mod restarts;
mod steps;
mod usage;

use gang_core::JobId;

use crate::error::MasterError;
use crate::job::State;
use crate::state::effects::Coord;
use crate::state::events::{ExitHow, LaunchFailure, RankExit};
use crate::state::reactor;
use crate::state::testkit::{World, caller, new_job};
use crate::state::views::NodeState;

/// One step of a case; job ids are given in submission order from 1.
#[derive(Debug, Clone)]
pub enum S {
    /// Submit a job of this shape (as uid 1000).
    Submit(&'static str),
    /// Submit as this uid.
    SubmitAs(&'static str, u32),
    /// Submit as uid 1000, the job changed first (a dependency, held, an array).
    SubmitWith(&'static str, fn(&mut crate::state::events::NewJob)),
    /// Update a job as this uid (hold, time limit); `Err` text expected, or "" for success.
    Update(u64, u32, Option<bool>, Option<u64>, &'static str),
    /// Submitting as this uid is refused with this text.
    RefusedAs(&'static str, u32, &'static str),
    /// This uid lists exactly these jobs (newest first).
    Sees(u32, &'static [u64]),
    /// This uid may not see the job: the error says so.
    Hidden(u64, u32, &'static str),
    /// Drain a node as this uid; refused if `false`.
    DrainAs(Coord, u32, bool),
    /// Submit with a time limit in seconds.
    SubmitLimited(&'static str, u64),
    /// Submitting this shape is refused with this text.
    Refused(&'static str, &'static str),
    /// Every launch of the job is sent; confirm them all (the agents started the ranks).
    Start(u64),
    /// The same, each launch order checked first.
    StartChecked(u64, fn(&crate::state::effects::LaunchOrder)),
    /// The launch of that rank could not reach its agent (the others start).
    LaunchUnreachable(u64, u32),
    /// The launch of this rank of the job failed (the agent refused, naming its node).
    LaunchFails(u64, u32),
    /// A rank exits with a code.
    Exit(u64, u32, i32),
    /// Every rank still running exits with this code / is killed by this signal.
    ExitAll(u64, i32),
    KilledAll(u64, i32),
    /// Cancel as this uid; refused if `false`.
    Cancel(u64, u32, bool),
    /// Time passes (ms); agents that are not silent heartbeat; then a tick.
    Wait(i64),
    /// An agent stops talking (its node's link is cut, or it died).
    Silence(Coord),
    /// The master itself is stopped this long (SIGSTOP, swap, a disk holding a commit):
    /// every clock moves but its responsive time; then its tick, before any heartbeat
    /// (as after SIGCONT: the timer is due, the agents' calls are still on their way).
    Pause(i64),
    /// The node is up (true) or down.
    Up(Coord, bool),
    /// An agent registers (again), listing the ranks it runs.
    Register(Coord),
    RegisterAll,
    /// Drain / resume a node.
    Drain(Coord, bool),
    /// The master restarts from what it saved.
    Restart,
    /// Expectations.
    State(u64, State),
    Reason(u64, &'static str),
    Code(u64, Option<i32>),
    /// The job's ranks on these nodes were signalled, with this grace.
    Signalled(u64, usize, u32),
    /// Launch orders for the job are pending (not yet confirmed).
    Launching(u64, usize),
    Queue(&'static [u64]),
    /// The slices the job holds, home first.
    Slices(u64, &'static [u32]),
    /// The newest table has this many rows, and every agent that is up holds it.
    Tables(usize),
    /// Tables to this node are lost on the way (or no longer).
    Lose(Coord, bool),
    /// The node's agent holds an older table than the newest.
    Behind(Coord),
    /// An agent registers and is told to kill these jobs.
    RegisterKills(Coord, &'static [u64]),
    /// Rank 0 of the job was announced running (for stdin).
    Rank0(u64),
    /// The job's pending reason is exactly this (empty: not queued).
    Pending(u64, &'static str),
    /// End an allocation (its command exited with this code) as uid 1000; the error
    /// expected, or "" for success.
    EndAlloc(u64, i32, &'static str),
    /// The job runs (or ran) on this rectangle.
    On(u64, &'static str),
}

/// The launch of `rank` of `job` fails as `why` says for its node; the other ranks start.
fn fail_launch(w: &mut World, job: u64, rank: u32, why: impl FnOnce(Coord) -> LaunchFailure) {
    let mut launches = w.fx.take_launches(JobId(job));
    let i = launches
        .iter()
        .position(|(_, o)| o.rank == rank)
        .expect("launched");
    let (node, _) = launches.remove(i);
    let why = why(node);
    w.step(|st, fx, now| reactor::on_launched(st, fx, now, JobId(job), rank, Err(why)));
    for (node, order) in launches {
        w.started(node, &order);
    }
}

pub fn run(mut w: World, steps: &[S]) -> World {
    for (i, s) in steps.iter().enumerate() {
        let at = || format!("step {i} ({s:?})");
        match s.clone() {
            S::Submit(shape) => submit(&mut w, shape, 0),
            S::SubmitLimited(shape, limit) => submit(&mut w, shape, limit),
            S::SubmitAs(shape, uid) => {
                let job = new_job(shape, uid, 0);
                w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
                    .unwrap_or_else(|e| panic!("{}: {e}", at()));
            }
            S::SubmitWith(shape, change) => {
                let mut job = new_job(shape, 1000, 0);
                change(&mut job);
                w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
                    .unwrap_or_else(|e| panic!("{}: {e}", at()));
            }
            S::Update(job, uid, hold, time_limit_s, want) => {
                let by = caller(uid);
                let u = crate::state::events::JobUpdate {
                    job: JobId(job),
                    hold,
                    time_limit_s,
                    name: None,
                    end_with: None,
                };
                let r = w.step(|st, fx, now| reactor::on_update(st, fx, now, &by, u));
                match r {
                    Ok(_) => assert_eq!(want, "", "{}", at()),
                    Err(e) => {
                        assert!(
                            !want.is_empty() && e.to_string().contains(want),
                            "{}: {e}",
                            at()
                        )
                    }
                }
            }
            S::RefusedAs(shape, uid, text) => {
                let job = new_job(shape, uid, 0);
                let e = w
                    .step(|st, fx, now| reactor::on_submit(st, fx, now, job))
                    .expect_err(&at());
                assert!(e.to_string().contains(text), "{}: {e}", at());
            }
            S::Sees(uid, ids) => {
                let seen: Vec<u64> =
                    w.st.list_for(&caller(uid), &Default::default(), w.now)
                        .views
                        .iter()
                        .map(|j| j.id.0)
                        .collect();
                assert_eq!(seen, ids, "{}", at());
            }
            S::Hidden(job, uid, text) => {
                let e =
                    w.st.view_for(&caller(uid), JobId(job), w.now)
                        .expect_err(&at());
                assert_eq!(e.to_string(), text, "{}", at());
            }
            S::DrainAs(node, uid, allowed) => {
                let by = caller(uid);
                let r = w.step(|st, fx, now| reactor::on_set_drained(st, fx, now, node, true, &by));
                match (r, allowed) {
                    (Ok(_), true) => {}
                    (Err(MasterError::AdminOnly { .. }), false) => {}
                    (r, _) => panic!("{}: {r:?}", at()),
                }
            }
            S::Refused(shape, text) => {
                let r =
                    w.step(|st, fx, now| reactor::on_submit(st, fx, now, new_job(shape, 1000, 0)));
                let e = r.expect_err(&at());
                assert!(e.to_string().contains(text), "{}: {e}", at());
            }
            S::Start(job) => {
                let launches = w.fx.take_launches(JobId(job));
                assert!(!launches.is_empty(), "{}: nothing launched", at());
                for (node, order) in launches {
                    w.started(node, &order);
                }
            }
            S::StartChecked(job, check) => {
                let launches = w.fx.take_launches(JobId(job));
                assert!(!launches.is_empty(), "{}: nothing launched", at());
                for (node, order) in launches {
                    check(&order);
                    w.started(node, &order);
                }
            }
            S::LaunchUnreachable(job, rank) => {
                fail_launch(&mut w, job, rank, |node| LaunchFailure::Unreachable {
                    node,
                    detail: "connection refused".into(),
                })
            }
            S::LaunchFails(job, rank) => fail_launch(&mut w, job, rank, |(x, y)| {
                LaunchFailure::Refused(format!("node ({x},{y}): cannot start \"./a.out\""))
            }),
            S::Exit(job, rank, code) => exit(&mut w, job, rank, ExitHow::Code(code)),
            S::ExitAll(job, code) => exit_all(&mut w, job, ExitHow::Code(code)),
            S::KilledAll(job, sig) => exit_all(&mut w, job, ExitHow::Signal(sig)),
            S::Cancel(job, uid, allowed) => {
                let by = caller(uid);
                let r = w.step(|st, fx, now| reactor::on_cancel(st, fx, now, JobId(job), &by));
                match (r, allowed) {
                    (Ok(_), true) => {}
                    (Err(MasterError::NotOwner { .. }), false) => {}
                    (r, _) => panic!("{}: {r:?}", at()),
                }
            }
            S::Wait(ms) => w.tick_after_ms(ms),
            S::Silence(node) => {
                w.silent.insert(node);
            }
            S::Pause(ms) => {
                w.pause_ms(ms);
                w.step(reactor::on_tick);
            }
            S::Up(node, up) => {
                let state = w.st.nodes_view().nodes.into_iter().find(|v| v.node == node);
                let is_up = state.as_ref().is_some_and(|v| v.state == NodeState::Up);
                assert_eq!(is_up, up, "{}: {state:?}", at());
            }
            S::Register(node) => {
                w.register(node);
            }
            S::RegisterAll => w.register_all(),
            S::Drain(node, drained) => {
                let admin = caller(0);
                w.step(|st, fx, now| reactor::on_set_drained(st, fx, now, node, drained, &admin))
                    .expect("drained");
            }
            S::Restart => w = w.restart(),
            S::State(job, state) => assert_eq!(w.view(job).state(), state, "{}", at()),
            S::Reason(job, text) => {
                let r = w.view(job).record.reason;
                assert!(r.contains(text), "{}: reason {r:?}", at());
            }
            S::Pending(job, text) => {
                assert_eq!(w.view(job).pending_reason, text, "{}", at());
            }
            S::Code(job, code) => assert_eq!(w.view(job).exit_code, code, "{}", at()),
            S::EndAlloc(job, code, want) => {
                let by = caller(1000);
                let u = crate::state::events::JobUpdate {
                    job: JobId(job),
                    hold: None,
                    time_limit_s: None,
                    name: None,
                    end_with: Some(code),
                };
                match w.step(|st, fx, now| reactor::on_update(st, fx, now, &by, u)) {
                    Ok(_) => assert_eq!(want, "", "{}", at()),
                    Err(e) => assert_eq!(e.to_string(), want, "{}", at()),
                }
            }
            S::On(job, at_text) => {
                let sm = w.view(job).submesh.map(|s| s.to_string());
                assert_eq!(sm.as_deref(), Some(at_text), "{}", at());
            }
            S::Signalled(job, nodes, grace) => {
                let sigs = w.fx.take_signals(JobId(job));
                assert_eq!(sigs.len(), nodes, "{}: {sigs:?}", at());
                assert!(sigs.iter().all(|&(_, g)| g == grace), "{}: {sigs:?}", at());
            }
            S::Launching(job, n) => {
                let pending =
                    w.fx.launches()
                        .iter()
                        .filter(|(_, o)| o.job == JobId(job))
                        .count();
                assert_eq!(pending, n, "{}", at());
            }
            S::Queue(ids) => {
                let q: Vec<u64> = w.st.matrix_view(w.now).queue.iter().map(|j| j.0).collect();
                assert_eq!(q, ids, "{}", at());
            }
            S::Slices(job, slices) => assert_eq!(w.view(job).slices, slices, "{}", at()),
            S::Tables(rows) => {
                let sent = w.fx.take_tables();
                let newest = sent.iter().map(|(_, t)| t).max_by_key(|t| t.version);
                let newest = newest.unwrap_or_else(|| panic!("{}: no table sent", at()));
                assert_eq!(newest.rows.len(), rows, "{}", at());
                for n in
                    w.st.nodes_view()
                        .nodes
                        .iter()
                        .filter(|n| n.state != NodeState::Down)
                {
                    assert_eq!(
                        w.held.get(&n.node),
                        Some(&newest.version),
                        "{}: {:?}",
                        at(),
                        n.node
                    );
                    assert_eq!(n.table_version, newest.version, "{}: acknowledged", at());
                }
            }
            S::Lose(node, lost) => {
                if lost {
                    w.fx.lossy.insert(node);
                } else {
                    w.fx.lossy.remove(&node);
                }
            }
            S::Behind(node) => {
                let latest =
                    w.fx.tables()
                        .iter()
                        .map(|(_, t)| t.version)
                        .max()
                        .unwrap_or(0);
                assert!(w.held.get(&node).copied().unwrap_or(0) < latest, "{}", at());
            }
            S::RegisterKills(node, ids) => {
                let kills: Vec<u64> = w.register(node).iter().map(|j| j.0).collect();
                assert_eq!(kills, ids, "{}", at());
            }
            S::Rank0(job) => {
                let (x, y) = node_of(&w, job, 0);
                assert!(
                    w.fx.rank0()
                        .contains(&(JobId(job), crate::state::testkit::addr((x, y)))),
                    "{}: {:?}",
                    at(),
                    w.fx.rank0()
                );
            }
        }
    }
    w.fx.assert_quiet();
    w
}

fn submit(w: &mut World, shape: &str, limit: u64) {
    let job = new_job(shape, 1000, limit);
    w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
        .expect("accepted");
}

fn node_of(w: &World, job: u64, rank: u32) -> Coord {
    let sm = w.view(job).submesh.expect("placed");
    (sm.x + rank % sm.w, sm.y + rank / sm.w)
}

fn exit(w: &mut World, job: u64, rank: u32, how: ExitHow) {
    let node = node_of(w, job, rank);
    w.running
        .entry(node)
        .or_default()
        .remove(&(JobId(job), rank));
    let exit = RankExit {
        job: JobId(job),
        rank,
        node,
        how,
        abort: None,
        lost: vec![],
        usage: Default::default(),
    };
    w.step(|st, fx, now| reactor::on_rank_exit(st, fx, now, exit));
}

fn exit_all(w: &mut World, job: u64, how: ExitHow) {
    // Silent agents cannot report.
    let ranks: Vec<u32> = w
        .running
        .iter()
        .filter(|(n, _)| !w.silent.contains(n))
        .flat_map(|(_, rs)| rs)
        .filter(|(j, _)| j.0 == job)
        .map(|&(_, r)| r)
        .collect();
    for rank in ranks {
        exit(w, job, rank, how.clone());
    }
}
