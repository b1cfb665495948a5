//! Targets of the NodeAgent RPCs, as far as the agent's pure code goes: `proto_launch`
//! (the conversion `service::rank_request`, then `launch::plan` and `launch::mpi::serve`
//! on nodes of each kind), `proto_node_table` (`Table::from_proto`, the tables held and
//! the switch plan built from them), `proto_signal` and `proto_stdin` (decoding and what
//! the service takes from them). Refusals are the request's fault (InvalidArgument or
//! PermissionDenied) and say why; an accepted launch plan has nothing in it that a
//! process start could choke on.

use std::collections::BTreeSet;
use std::time::Duration;

use gang_core::GangMode;
use gang_proto::v1::{self, LaunchRequest, NodeTable, SignalRequest, StdinRequest};
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message;
use tonic::{Code, Status};

use crate::error::{AgentError, Coord};
use crate::launch::env_policy::valid_env_name;
use crate::launch::plan::{LaunchPolicy, MAX_RANKS, NodeFacts, RunAs, plan};
use crate::mpi::program::{ProgramMpi, Unseen};
use crate::ranks::RankKey;
use crate::service::rank_request;
use crate::switch::plan::{TargetInfo, build};
use crate::switch::table::{MAX_HELD, Table, Tables};

const NODE: Coord = Coord { x: 1, y: 2 };

/// Decode as tonic does; what decodes re-encodes to itself.
fn decode<M: Message + Default + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> Result<Option<M>, TestCaseError> {
    let Ok(m) = M::decode(bytes) else {
        return Ok(None);
    };
    let again = M::decode(&m.encode_to_vec()[..]).ok();
    prop_assert_eq!(again.as_ref(), Some(&m));
    Ok(Some(m))
}

/// One request as bytes: a mutated seed, fresh bytes, or a built message.
fn encoded<M: Message + std::fmt::Debug + 'static>(
    target: &str,
    built: impl Strategy<Value = M> + 'static,
) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        3 => gang_fuzz::mutated(gang_fuzz::seeds(target)),
        1 => gang_fuzz::fresh(256),
        2 => built.prop_map(|m| m.encode_to_vec()),
    ]
    .boxed()
}

fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..=5,
        Just(u32::MAX),
        Just(MAX_RANKS),
        Just(MAX_RANKS + 1),
        any::<u32>()
    ]
}

fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0i64),
        -2_000_000_000i64..2_000_000_000,
        1_700_000_000_000_000_000i64..1_700_000_100_000_000_000,
        any::<i64>(),
    ]
}

// ---------------------------------------------------------------------------- Launch

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._/-]{0,10}",
        Just(String::new()),
        Just("a\0b".to_string()),
        "\\PC{0,6}",
    ]
}

fn launch_request() -> impl Strategy<Value = LaunchRequest> {
    let env_key = prop_oneof![
        "[A-Z_]{1,6}",
        Just("PATH".to_string()),
        Just("A=B".into()),
        Just(String::new()),
        Just("X\0".into())
    ];
    let cwd = prop_oneof![
        Just("/data".to_string()),
        Just("rel".into()),
        Just(String::new()),
        Just("/a\0b".into()),
        text()
    ];
    let part = prop::option::weighted(
        0.7,
        (edge_u32(), edge_u32(), edge_u32(), edge_u32()).prop_map(|(x, y, w, h)| v1::Submesh {
            x,
            y,
            w,
            h,
        }),
    );
    (
        (any::<u64>(), edge_u32(), edge_u32(), vec(text(), 0..4), cwd),
        (
            vec((env_key, text()), 0..4),
            prop_oneof![Just(0u32), Just(1000), Just(1001), any::<u32>()],
            prop_oneof![Just(0u32), Just(100), any::<u32>()],
            vec(any::<u32>(), 0..3),
            text(),
        ),
        (any::<bool>(), -1i32..8, part, -1i32..5, -1i32..7),
        (any::<bool>(), text(), text(), text()),
    )
        .prop_map(
            |(
                (job_id, rank, size, argv, cwd),
                (env, uid, gid, groups, user),
                (stdin, gang, part, msg_context, mpi),
                (mpi_check, output, error, namespace),
            )| {
                let argv_len = argv.len() as u32;
                let script: String = output.chars().rev().collect();
                LaunchRequest {
                    job_id,
                    rank,
                    size,
                    argv,
                    cwd,
                    env: env.into_iter().collect(),
                    uid,
                    gid,
                    stdin,
                    gang,
                    groups,
                    user,
                    part,
                    msg_context,
                    mpi,
                    mpi_check,
                    output,
                    error,
                    namespace,
                    fence_width: 0,
                    fence_parent: String::new(),
                    allocation: 0,
                    // A script from the fuzzer, at any place (refused where it cannot go).
                    script,
                    script_at: mpi_check as u32 * argv_len,
                    // Any choice, known or not (a pty with output files is refused).
                    pty: gang % 4,
                }
            },
        )
}

/// The nodes a request may reach: a root agent (root ranks refused, allowed), and an
/// unprivileged one; with and without the PMIx server.
fn nodes() -> Vec<NodeFacts> {
    let facts = |agent_uid, allow_root, pmix_built| NodeFacts {
        node: NODE,
        agent_uid,
        agent_gid: agent_uid,
        policy: LaunchPolicy {
            allow_root,
            env_allow: BTreeSet::new(),
            emulate: false,
        },
        pmix_built,
    };
    vec![
        facts(0, false, true),
        facts(0, true, false),
        facts(1000, false, true),
    ]
}

/// A refusal: the request's fault, naming the node and the problem.
fn refused(e: AgentError, codes: &[Code]) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    let status = Status::from(e);
    prop_assert!(
        codes.contains(&status.code()),
        "{:?}: {}",
        status.code(),
        msg
    );
    prop_assert!(
        msg.starts_with(&format!("node {NODE}: ")) && msg.len() > 12,
        "{msg}"
    );
    Ok(())
}

fn launch(bytes: Vec<u8>) -> Result<u64, TestCaseError> {
    let Some(wire) = decode::<LaunchRequest>(&bytes)? else {
        return Ok(1);
    };
    let req = rank_request(wire.clone());
    prop_assert_eq!(
        (req.key, req.size, &req.argv, &req.cwd, &req.env),
        (
            RankKey {
                job_id: wire.job_id,
                rank: wire.rank
            },
            wire.size,
            &wire.argv,
            &wire.cwd,
            &wire.env
        )
    );
    for facts in nodes() {
        let p = match plan(req.clone(), &facts) {
            Err(e) => {
                refused(e, &[Code::InvalidArgument, Code::PermissionDenied])?;
                continue;
            }
            Ok(p) => p,
        };
        let r = &p.req;
        let nul = |s: &str| s.contains('\0');
        prop_assert!(!r.argv.is_empty() && !r.argv[0].is_empty());
        prop_assert!(!r.argv.iter().any(|a| nul(a)) && !nul(&r.cwd) && r.cwd.starts_with('/'));
        prop_assert!(r.env.iter().all(|(k, v)| valid_env_name(k) && !nul(v)));
        prop_assert!(!nul(&r.output) && !nul(&r.error));
        prop_assert!(r.size >= 1 && r.size <= MAX_RANKS && r.key.rank < r.size);
        if let Some(part) = r.part {
            prop_assert!(part.w > 0 && part.h > 0 && part.area() >= u64::from(r.size));
        }
        match &p.run_as {
            RunAs::Agent => prop_assert_eq!(r.submitter.uid, facts.agent_uid),
            RunAs::User { uid, .. } => {
                prop_assert_eq!(facts.agent_uid, 0);
                prop_assert!(*uid != 0 || facts.policy.allow_root);
            }
        }
        let programs = [
            ProgramMpi::NoMpi,
            ProgramMpi::Mpich("libmpi.so.12".into()),
            ProgramMpi::OpenMpi("libmpi.so.40".into()),
            ProgramMpi::Unseen(Unseen::Script),
        ];
        for program in &programs {
            match crate::launch::mpi::serve(&p, program, &facts) {
                Err(why) => prop_assert!(!why.to_string().is_empty()),
                Ok(m) => {
                    if let Some(pmi) = &m.pmi {
                        prop_assert_eq!(pmi.size, r.size);
                    }
                    if let Some(pmix) = m.pmix.filter(|_| r.size <= 64) {
                        // What the registration builds from it (the node map).
                        let l = &pmix.launch;
                        let names = crate::mpi::pmix::node_names(l.part, l.size, NODE, l.key.rank);
                        prop_assert_eq!(names.len(), r.size as usize);
                    }
                }
            }
        }
    }
    Ok(1)
}

#[test]
fn fuzz_proto_launch() {
    gang_fuzz::run(
        "proto_launch",
        400,
        encoded("proto_launch", launch_request()),
        launch,
    );
}

// ------------------------------------------------------------------------- NodeTable

fn node_table() -> impl Strategy<Value = NodeTable> {
    (
        prop_oneof![0u64..=4, any::<u64>()],
        edge_i64(),
        prop_oneof![
            Just(1_000_000i64),
            Just(999_999),
            Just(i64::MAX),
            1_000_000i64..10_000_000_000,
            any::<i64>()
        ],
        edge_i64(),
        vec(prop_oneof![0u64..=4, any::<u64>()], 0..6),
        vec(prop_oneof![0u64..=4, any::<u64>()], 0..3),
    )
        .prop_map(
            |(version, epoch_ns, quantum_ns, effective_ns, rows, parked)| NodeTable {
                version,
                epoch_ns,
                quantum_ns,
                effective_ns,
                rows,
                parked,
            },
        )
}

/// Ranks here: jobs 1 to 3 in each mode.
fn targets() -> Vec<TargetInfo> {
    let modes = [
        GangMode::Stop,
        GangMode::Freeze,
        GangMode::Priority,
        GangMode::None,
    ];
    (1..=3u64)
        .zip(modes.iter().cycle())
        .map(|(job_id, &mode)| TargetInfo {
            key: RankKey { job_id, rank: 0 },
            slot_job: job_id,
            mode,
            freezer: job_id == 2,
        })
        .collect()
}

fn node_tables(reqs: Vec<(Vec<u8>, i64)>) -> Result<u64, TestCaseError> {
    let mut tables = Tables::new();
    for (bytes, now_ns) in &reqs {
        let Some(t) = decode::<NodeTable>(bytes)? else {
            continue;
        };
        let table = match Table::from_proto(t.clone()) {
            Err(what) => {
                let e = AgentError::InvalidArgument { node: NODE, what };
                refused(e, &[Code::InvalidArgument])?;
                prop_assert!(t.version == 0 || t.quantum_ns < crate::switch::table::MIN_QUANTUM_NS);
                continue;
            }
            Ok(table) => table,
        };
        let newest = tables.newest_version();
        let offer = tables.offer(table, *now_ns);
        use crate::switch::table::Offer;
        match offer {
            Offer::Accepted { .. } => prop_assert!(t.version > newest),
            Offer::Duplicate => prop_assert_eq!(t.version, newest),
            Offer::Stale => prop_assert!(t.version < newest),
        }
        let held = tables.held();
        prop_assert!(!held.is_empty() && held.len() <= MAX_HELD);
        for w in held.windows(2) {
            prop_assert!(w[0].from_ns < w[1].from_ns && w[0].table.version < w[1].table.version);
        }
        let dying: BTreeSet<u64> = [3].into();
        let plan = build(held, &targets(), &dying);
        for t in [
            *now_ns,
            now_ns.saturating_add(1_000_000),
            now_ns.saturating_sub(1),
            i64::MIN,
            i64::MAX,
        ] {
            let _ = plan.want_at(t);
            if let Some(b) = plan.next_boundary_after(t) {
                prop_assert!(
                    b > t || b == i64::MAX,
                    "the next boundary after {} is {}",
                    t,
                    b
                );
            }
            if let Some(b) = plan.boundary_at_or_before(t) {
                prop_assert!(b <= t, "the boundary at or before {} is {}", t, b);
            }
        }
        let _ = plan.managed();
    }
    Ok(reqs.len() as u64)
}

#[test]
fn fuzz_proto_node_table() {
    let input = vec(
        (encoded("proto_node_table", node_table()), edge_i64()),
        1..=4,
    );
    gang_fuzz::run("proto_node_table", 300, input, node_tables);
}

// -------------------------------------------------------------------- Signal, Stdin

#[test]
fn fuzz_proto_signal() {
    let built = (any::<u64>(), any::<u32>())
        .prop_map(|(job_id, grace_ms)| SignalRequest { job_id, grace_ms });
    gang_fuzz::run(
        "proto_signal",
        200,
        encoded("proto_signal", built),
        |bytes| {
            if let Some(req) = decode::<SignalRequest>(&bytes)? {
                // What the service makes of it: a grace of at most u32::MAX ms (49 days).
                let grace = Duration::from_millis(u64::from(req.grace_ms));
                prop_assert!(grace <= Duration::from_millis(u64::from(u32::MAX)));
            }
            Ok(1)
        },
    );
}

#[test]
fn fuzz_proto_stdin() {
    let built = (any::<u64>(), vec(any::<u8>(), 0..64), any::<bool>())
        .prop_map(|(job_id, data, eof)| StdinRequest { job_id, data, eof });
    gang_fuzz::run("proto_stdin", 200, encoded("proto_stdin", built), |bytes| {
        if let Some(req) = decode::<StdinRequest>(&bytes)? {
            // The service passes it on whole; an unknown job is the caller's NotFound.
            let e = AgentError::UnknownJob {
                node: NODE,
                job_id: req.job_id,
            };
            refused(e, &[Code::NotFound])?;
        }
        Ok(1)
    });
}
