//! Targets of the agent registry: `proto_register`, `proto_heartbeat`, `proto_rank_exit`
//! (into the reactor), `proto_switch_report` (the switch figures and their metrics),
//! `proto_clock_probe`. The output log's targets are in `output_log.rs`.

use gang_core::JobId;
use gang_proto::v1;
use proptest::collection::vec;
use proptest::prelude::*;
use tonic::Code;

use super::{
    coord, decode, edge_i64, edge_u64, encoded, finish, job_id, rank, refused, reply, saved,
    short_text, world,
};
use crate::metrics::Metrics;
use crate::service::convert;
use crate::state::events::ExitHow;
use crate::state::reactor;
use crate::state::testkit::{World, addr};
use crate::switch_stats::SwitchStats;

/// A case of agent requests: each, and whether time passes after it (heartbeats from the
/// other agents, then the master's tick: timeouts, run time, time limits).
fn with_time(
    target: &str,
    built: impl Strategy<Value = impl prost::Message + std::fmt::Debug + 'static> + 'static,
) -> impl Strategy<Value = Vec<(Vec<u8>, bool)>> {
    vec((encoded(target, built), prop::bool::weighted(0.3)), 1..=4)
}

/// Run a case through a fresh fixture, time passing where asked, and restart at the end.
fn through_world(
    reqs: &[(Vec<u8>, bool)],
    mut each: impl FnMut(&mut World, &[u8]) -> Result<(), TestCaseError>,
) -> Result<u64, TestCaseError> {
    let mut w = world();
    for (bytes, wait) in reqs {
        each(&mut w, bytes)?;
        if *wait {
            w.tick_after_ms(700);
        }
    }
    finish(w)?;
    Ok(reqs.len() as u64)
}

fn rank_refs() -> impl Strategy<Value = Vec<v1::RankRef>> {
    vec(
        (job_id(), rank()).prop_map(|(job_id, rank)| v1::RankRef { job_id, rank }),
        0..6,
    )
}

fn on_mesh(x: u32, y: u32) -> bool {
    x < 4 && y < 4
}

// ------------------------------------------------------------------------------ Register

fn register_request() -> impl Strategy<Value = v1::RegisterRequest> {
    (coord(), coord(), short_text(), rank_refs()).prop_map(|(x, y, address, running)| {
        v1::RegisterRequest {
            x,
            y,
            address,
            running,
        }
    })
}

fn register(w: &mut World, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Some(req) = decode::<v1::RegisterRequest>(bytes)? else {
        return Ok(());
    };
    let mut reg = convert::registration(req.clone());
    prop_assert_eq!((reg.node, &reg.address), ((req.x, req.y), &req.address));
    let listed: Vec<(u64, u32)> = req.running.iter().map(|r| (r.job_id, r.rank)).collect();
    let converted: Vec<(u64, u32)> = reg.running.iter().map(|(j, r)| (j.0, *r)).collect();
    prop_assert_eq!(&converted, &listed);
    // The harness checks every order goes to the node's own agent, so the address is the
    // one it expects; the master only stores it and dials it.
    reg.address = addr(reg.node);
    match w.step(|st, fx, now| reactor::on_register(st, fx, now, reg)) {
        Err(e) => {
            prop_assert!(
                !on_mesh(req.x, req.y),
                "a node of the mesh was refused: {e}"
            );
            refused(e, &[Code::NotFound], &["not on the"])?;
        }
        Ok(done) => {
            prop_assert!(on_mesh(req.x, req.y));
            prop_assert_eq!((done.mesh_w, done.mesh_h), (4, 4));
            for j in &done.kill_jobs {
                prop_assert!(
                    listed.iter().any(|(l, _)| *l == j.0),
                    "killed unlisted job {j}"
                );
            }
            let node = &w.st.nodes_view().nodes[(req.y * 4 + req.x) as usize];
            prop_assert_eq!(node.node, (req.x, req.y));
            prop_assert!(node.state != crate::state::views::NodeState::Down);
            reply(&convert::registered(done))?;
        }
    }
    Ok(())
}

#[test]
fn fuzz_proto_register() {
    let input = with_time("proto_register", register_request());
    gang_fuzz::run("proto_register", 150, input, |reqs| {
        through_world(&reqs, register)
    });
}

// ----------------------------------------------------------------------------- Heartbeat

/// Activity reports of ranks: of the fixture's jobs (on the node reporting or another)
/// and of unknown ones, with any counts.
fn activity() -> impl Strategy<Value = Vec<v1::RankActivity>> {
    vec(
        (
            (job_id(), rank(), edge_i64()),
            (prop_oneof![Just(-1i32), 0..4, any::<i32>()], any::<i32>()),
            (edge_u64(), edge_u64()),
        )
            .prop_map(
                |((job_id, rank, blocked_since_ns), (source, tag), (posted, delivered))| {
                    v1::RankActivity {
                        job_id,
                        rank,
                        blocked_since_ns,
                        source,
                        tag,
                        posted,
                        delivered,
                    }
                },
            ),
        0..5,
    )
}

fn heartbeat_request() -> impl Strategy<Value = v1::HeartbeatRequest> {
    (
        (coord(), coord(), rank_refs(), activity()),
        (edge_i64(), edge_i64(), any::<bool>()),
        prop_oneof![0u64..=3, edge_u64()],
    )
        .prop_map(
            |(
                (x, y, running, activity),
                (clock_offset_ns, clock_error_ns, clock_from_host),
                table_version,
            )| {
                v1::HeartbeatRequest {
                    x,
                    y,
                    running,
                    clock_offset_ns,
                    clock_error_ns,
                    clock_from_host,
                    table_version,
                    activity,
                }
            },
        )
}

fn heartbeat(w: &mut World, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Some(req) = decode::<v1::HeartbeatRequest>(bytes)? else {
        return Ok(());
    };
    let hb = convert::heartbeat(req.clone());
    prop_assert_eq!(hb.node, (req.x, req.y));
    prop_assert_eq!(
        (hb.clock.offset_ns, hb.clock.error_ns, hb.clock.from_host),
        (req.clock_offset_ns, req.clock_error_ns, req.clock_from_host)
    );
    prop_assert_eq!(hb.running.len(), req.running.len());
    let kept: Vec<(u64, u32, u64, u64)> = hb
        .activity
        .iter()
        .map(|(j, a)| (j.0, a.rank, a.posted, a.delivered))
        .collect();
    let sent: Vec<(u64, u32, u64, u64)> = req
        .activity
        .iter()
        .map(|a| (a.job_id, a.rank, a.posted, a.delivered))
        .collect();
    prop_assert_eq!(kept, sent);
    let known = w.step(|st, fx, now| reactor::on_heartbeat(st, fx, now, hb));
    // Every agent of the fixture is up (and keeps heartbeating while time passes).
    prop_assert_eq!(known, on_mesh(req.x, req.y));
    reply(&v1::HeartbeatResponse {
        known,
        ..Default::default()
    })?;
    // What the clock reports become: the node listing.
    reply(&convert::nodes(&w.st.nodes_view()))
}

#[test]
fn fuzz_proto_heartbeat() {
    let input = with_time("proto_heartbeat", heartbeat_request());
    gang_fuzz::run("proto_heartbeat", 150, input, |reqs| {
        through_world(&reqs, heartbeat)
    });
}

// --------------------------------------------------------------------------------- Fence

fn fence_request() -> impl Strategy<Value = v1::FenceRequest> {
    let epoch =
        prop_oneof![4 => 0u32..=3, 1 => (0u32..3).prop_map(|d| u32::MAX - d), 1 => any::<u32>()];
    (
        (coord(), coord(), job_id(), rank()),
        (
            epoch.clone(),
            vec((short_text(), short_text()), 0..3),
            epoch,
        ),
    )
        .prop_map(
            |((x, y, job_id, rank), (epoch, puts, known_epoch))| v1::FenceRequest {
                x,
                y,
                job_id,
                rank,
                epoch,
                puts: puts.into_iter().collect(),
                known_epoch,
                wait_ms: 0,
            },
        )
}

/// Where rank `rank` of `job` runs, if the job is placed and has that rank.
fn rank_node(w: &World, job: u64, rank: u32) -> Option<(u32, u32)> {
    let view = w.st.view(JobId(job), w.now).ok()?;
    let sm = view.record.submesh?;
    (u64::from(rank) < sm.area()).then(|| (sm.x + rank % sm.w, sm.y + rank / sm.w))
}

/// A fence arrival (`at_home`: sent from the rank's own node, as an honest agent does).
fn fence(w: &mut World, bytes: &[u8], at_home: bool) -> Result<(), TestCaseError> {
    let Some(mut req) = decode::<v1::FenceRequest>(bytes)? else {
        return Ok(());
    };
    let home = rank_node(w, req.job_id, req.rank);
    if let (true, Some((x, y))) = (at_home, home) {
        (req.x, req.y) = (x, y);
    }
    let arrival = convert::fence_arrival(req.clone());
    prop_assert_eq!(
        (arrival.node, arrival.job.0, arrival.rank, arrival.epoch),
        ((req.x, req.y), req.job_id, req.rank, req.epoch)
    );
    prop_assert_eq!(arrival.puts.len(), req.puts.len());
    let known = w.st.view(JobId(req.job_id), w.now).is_ok();
    let there = home == Some((req.x, req.y));
    let before = saved(w);
    match w.step(|st, fx, now| reactor::on_fence(st, fx, now, arrival)) {
        Ok(answer) => {
            prop_assert!(
                there,
                "a fence of a rank not on node ({},{}) was taken",
                req.x,
                req.y
            );
            if let Some(space) = answer {
                let (kvs, delta) = space.answer(req.known_epoch);
                reply(&v1::FenceResponse {
                    kvs: kvs.into_iter().collect(),
                    delta,
                    pending: false,
                })?;
            }
        }
        Err(e) if req.epoch == 0 || req.epoch == u32::MAX => {
            refused(e, &[Code::InvalidArgument], &["fence epoch"])?
        }
        Err(e) if !known => refused(e, &[Code::NotFound], &["unknown job"])?,
        Err(e) => {
            let not_there = matches!(e, crate::error::MasterError::Forbidden(_));
            prop_assert!(
                !not_there || !there,
                "a rank on its own node was refused: {}",
                e
            );
            refused(
                e,
                &[
                    Code::PermissionDenied,
                    Code::FailedPrecondition,
                    Code::Unavailable,
                ],
                &["does not run on node", "is not running", "ahead of the job"],
            )?;
        }
    }
    prop_assert_eq!(saved(w), before, "a fence changed what is saved");
    Ok(())
}

#[test]
fn fuzz_proto_fence() {
    let input = vec(
        (
            encoded("proto_fence", fence_request()),
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.2),
        ),
        1..=4,
    );
    gang_fuzz::run("proto_fence", 150, input, |reqs| {
        let mut w = world();
        for (bytes, at_home, wait) in &reqs {
            fence(&mut w, bytes, *at_home)?;
            if *wait {
                w.tick_after_ms(700);
            }
        }
        finish(w)?;
        Ok(reqs.len() as u64)
    });
}

// ------------------------------------------------------------------------------ RankExit

fn rank_exit_request() -> impl Strategy<Value = v1::RankExit> {
    use v1::rank_exit::How;
    let how = prop_oneof![
        3 => prop_oneof![Just(0i32), Just(1), any::<i32>()].prop_map(How::Code),
        1 => prop_oneof![Just(9i32), Just(15), any::<i32>()].prop_map(How::Signal),
        1 => short_text().prop_map(How::Error),
    ];
    (
        job_id(),
        rank(),
        coord(),
        coord(),
        prop::option::weighted(0.9, how),
    )
        .prop_map(|(job_id, rank, x, y, how)| v1::RankExit {
            job_id,
            rank,
            x,
            y,
            how,
            ..Default::default()
        })
}

fn rank_exit(w: &mut World, bytes: &[u8]) -> Result<(), TestCaseError> {
    use v1::rank_exit::How;
    let Some(req) = decode::<v1::RankExit>(bytes)? else {
        return Ok(());
    };
    let exit = convert::rank_exit(req.clone(), vec![]);
    prop_assert_eq!(
        (exit.job.0, exit.rank, exit.node),
        (req.job_id, req.rank, (req.x, req.y))
    );
    let how_kept = match (&req.how, &exit.how) {
        (Some(How::Code(a)), ExitHow::Code(b)) | (Some(How::Signal(a)), ExitHow::Signal(b)) => {
            a == b
        }
        (Some(How::Error(a)), ExitHow::Error(b)) => a == b,
        (None, ExitHow::Unknown) => true,
        _ => false,
    };
    prop_assert!(how_kept, "{:?} became {:?}", req.how, exit.how);
    let known = w.st.view(JobId(req.job_id), w.now).is_ok();
    let before = saved(w);
    w.step(|st, fx, now| reactor::on_rank_exit(st, fx, now, exit));
    if !known {
        prop_assert_eq!(
            saved(w),
            before,
            "an exit of an unknown job changed what is saved"
        );
    }
    reply(&v1::RankExitAck {})
}

#[test]
fn fuzz_proto_rank_exit() {
    let input = with_time("proto_rank_exit", rank_exit_request());
    gang_fuzz::run("proto_rank_exit", 150, input, |reqs| {
        through_world(&reqs, rank_exit)
    });
}

// ---------------------------------------------------------- SwitchReport: the figures

fn switch_record() -> impl Strategy<Value = v1::SwitchRecord> {
    (
        (edge_u64(), edge_i64(), edge_i64()),
        (edge_i64(), edge_i64(), any::<u32>(), edge_i64()),
    )
        .prop_map(
            |((table_version, slot, deadline_ns), (first, last, actions, clock_error_ns))| {
                v1::SwitchRecord {
                    table_version,
                    slot,
                    deadline_ns,
                    first_signal_ns: first,
                    last_signal_ns: last,
                    actions,
                    clock_error_ns,
                }
            },
        )
}

fn switch_report() -> impl Strategy<Value = v1::SwitchReport> {
    (
        coord(),
        coord(),
        vec(switch_record(), 0..6),
        edge_u64(),
        (edge_u64(), edge_u64()),
    )
        .prop_map(
            |(x, y, records, dropped, (msg_flushed, msg_unflushed))| v1::SwitchReport {
                x,
                y,
                records,
                dropped,
                msg_flushed,
                msg_unflushed,
            },
        )
}

#[test]
fn fuzz_proto_switch_report() {
    let reports = vec(
        (encoded("proto_switch_report", switch_report()), edge_i64()),
        1..=4,
    );
    let settings = (
        prop_oneof![Just(0i64), 1i64..2_000_000_000, edge_i64()],
        1usize..50,
    );
    gang_fuzz::run(
        "proto_switch_report",
        400,
        (settings, reports),
        |((settle_ns, window), reports)| {
            let mut stats = SwitchStats::new(settle_ns, window);
            let metrics = Metrics::default();
            let mut records = 0u64;
            for (bytes, now_ns) in &reports {
                let Some(r) = decode::<v1::SwitchReport>(bytes)? else {
                    continue;
                };
                // As the registry's `report_switches` does with a report.
                let samples = stats.add(&r, *now_ns);
                records += r.records.len() as u64;
                prop_assert_eq!(samples.latency_ns.len(), r.records.len());
                prop_assert_eq!(samples.cost_ns.len(), r.records.len());
                let s = |ns: i64| ns.max(0) as f64 / 1e9;
                samples
                    .latency_ns
                    .iter()
                    .for_each(|&v| metrics.switch_latency_seconds.observe(s(v)));
                samples
                    .cost_ns
                    .iter()
                    .for_each(|&v| metrics.switch_cost_seconds.observe(s(v)));
                samples
                    .skew_ns
                    .iter()
                    .for_each(|&v| metrics.switch_skew_seconds.observe(s(v)));
                metrics.switches_dropped.inc_by(r.dropped);
                reply(&v1::SwitchReportAck {})?;
            }
            // As `GetStats` answers, and `/metrics` is scraped.
            stats.close(reports.last().map_or(0, |r| r.1));
            let st = stats.snapshot();
            prop_assert_eq!(st.switches_reported, records);
            for q in [&st.skew, &st.switch_latency, &st.switch_cost] {
                let q = q.as_ref().expect("every distribution is reported");
                prop_assert!(q.count <= window as u64);
                prop_assert!(q.p50_ns <= q.p99_ns && q.p99_ns <= q.max_ns, "{q:?}");
            }
            reply(&st)?;
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &metrics.registry)
                .map_err(|e| TestCaseError::fail(format!("metrics do not encode: {e}")))?;
            Ok(reports.len() as u64)
        },
    );
}

// ------------------------------------------------------------------------------ ClockProbe

#[test]
fn fuzz_proto_clock_probe() {
    let input = vec(
        encoded(
            "proto_clock_probe",
            edge_i64().prop_map(|t1_ns| v1::ClockProbeRequest { t1_ns }),
        ),
        1..=4,
    );
    gang_fuzz::run("proto_clock_probe", 400, input, |reqs| {
        for bytes in &reqs {
            let Some(req) = decode::<v1::ClockProbeRequest>(bytes)? else {
                continue;
            };
            // Answered at the edge: the agent's time comes back with the master's.
            let t2_ns = crate::actor::wall_ns();
            let res = v1::ClockProbeResponse {
                t1_ns: req.t1_ns,
                t2_ns,
                t3_ns: crate::actor::wall_ns(),
            };
            prop_assert!(res.t2_ns <= res.t3_ns);
            reply(&res)?;
        }
        Ok(reqs.len() as u64)
    });
}
