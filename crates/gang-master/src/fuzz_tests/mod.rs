//! Fuzz targets of the master's service edge (crates/gang-fuzz/README.md lists them all). Every request
//! message the master's gRPC services decode comes from arbitrary bytes (mutated corpus
//! seeds, fresh bytes, and encodings of messages built from what the fixture knows) and
//! goes where the service sends it: through `service::convert` into the reactor of a master
//! with jobs and agents, or into the output log, the switch figures or the token issuer.
//! After every request the target checks what the master promises its callers: a refusal
//! is an error whose message names the problem and whose status blames the request, an
//! acceptance leaves the master sane (`World::step` runs the sanity check after every
//! round), and what it saved comes back the same after a restart.
//!
//! In the crate because the reactor's harness (`state::testkit`) is test-only.

mod agents;
mod clients;
mod corpus;
mod corpus_agents;
mod output_log;
mod tokens;

use std::fmt::Debug;

use gang_core::JobId;
use proptest::collection::vec;
use proptest::prelude::*;
use prost::Message;
use tonic::{Code, Status};

use crate::config::{Limits, MasterConfig};
use crate::error::MasterError;
use crate::job::State;
use crate::state::reactor;
use crate::state::testkit::{World, config, new_job};

/// Callers of the fixture: the owners of its jobs, a stranger, an admin by configuration
/// (`testkit::caller`), and root.
const UIDS: [u32; 5] = [1000, 1001, 2000, 999, 0];

fn who() -> impl Strategy<Value = u32> {
    prop::sample::select(UIDS.to_vec())
}

/// Limits small enough that inputs reach them.
fn fuzz_config() -> MasterConfig {
    let mut c = config(4, 4, 2);
    c.limits = Limits {
        max_argv_bytes: 4096,
        max_env_bytes: 4096,
        max_job_nodes: 12,
        max_queued_per_user: 3,
        ..Limits::default()
    };
    c
}

/// A 4x4 master with two slices and every agent up: job 1 (2x2, uid 1000) and job 2 (4x3,
/// uid 1001) running, job 3 (1x1, uid 1001) starting (its launch order unanswered), job 4
/// (4x3, uid 1000) queued (no slice has room). 4x3 is the largest shape the fuzz limits
/// allow (`max_job_nodes` 12).
fn world() -> World {
    let mut w = World::new(fuzz_config());
    w.register_all();
    for (shape, uid) in [("2x2", 1000), ("4x3", 1001), ("1x1", 1001), ("4x3", 1000)] {
        // Time limits give the queue's head a reservation, so later jobs can backfill.
        let job = new_job(shape, uid, 3600);
        w.step(|st, fx, now| reactor::on_submit(st, fx, now, job))
            .expect("the fixture's jobs are valid");
    }
    for job in [1, 2] {
        for (node, order) in w.fx.take_launches(JobId(job)) {
            w.started(node, &order);
        }
    }
    w
}

/// Job ids the fixture has (and the next ones), or any.
fn job_id() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..=6, 1 => any::<u64>()]
}

/// Coordinates on the 4x4 mesh and just off it, or any.
fn coord() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..=5, 1 => any::<u32>()]
}

/// Ranks of the fixture's jobs and just past them, or any.
fn rank() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..=17, 1 => any::<u32>()]
}

/// A uid a request states: none (0), one of the fixture's, or any.
fn stated_uid() -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(0u32), 2 => who(), 1 => any::<u32>()]
}

fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0i64),
        -2_000_000_000i64..2_000_000_000,
        // Wall-clock nanoseconds now-ish, as agents report them.
        1_700_000_000_000_000_000i64..1_700_000_100_000_000_000,
        any::<i64>(),
    ]
}

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), 0u64..1000, any::<u64>()]
}

/// Short text: plausible, any printable, or empty.
fn short_text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9._/:-]{0,12}", "\\PC{0,8}", Just(String::new())]
}

/// One request as bytes: a mutated corpus seed, fresh bytes, or an encoded built message.
fn encoded<M: Message + Debug + 'static>(
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

/// A case: 1 to 4 requests of one type, each with the caller who sends it.
fn from_callers(
    target: &str,
    built: impl Strategy<Value = impl Message + Debug + 'static> + 'static,
) -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
    vec((who(), encoded(target, built)), 1..=4)
}

/// Decode as tonic does at the service edge (prost, the whole message). Whatever decodes
/// encodes again to bytes that decode to the same message.
fn decode<M: Message + Default + PartialEq + Debug>(
    bytes: &[u8],
) -> Result<Option<M>, TestCaseError> {
    let Ok(m) = M::decode(bytes) else {
        return Ok(None);
    };
    let again = M::decode(&m.encode_to_vec()[..]);
    prop_assert_eq!(
        again.as_ref().ok(),
        Some(&m),
        "re-encoding changed the message"
    );
    Ok(Some(m))
}

/// A reply as the client receives it: it encodes and decodes to itself.
fn reply<M: Message + Default + PartialEq + Debug>(m: &M) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        &M::decode(&m.encode_to_vec()[..]).expect("a reply decodes"),
        m
    );
    Ok(())
}

/// A refusal: its status blames the request (one of `codes`; never an internal error) and
/// its message names one of `problems`.
fn refused(e: MasterError, codes: &[Code], problems: &[&str]) -> Result<(), TestCaseError> {
    let (msg, debug) = (e.to_string(), format!("{e:?}"));
    let status = Status::from(e);
    prop_assert!(
        codes.contains(&status.code()),
        "refused as {:?}: {msg} ({debug})",
        status.code()
    );
    prop_assert_eq!(status.message(), msg.as_str());
    prop_assert!(
        problems.iter().any(|p| msg.contains(p)),
        "the refusal names no problem: {msg:?} ({debug})"
    );
    Ok(())
}

/// What the master has saved, comparable (records have no `PartialEq`).
fn saved(w: &World) -> String {
    format!("{:?}", w.fx.db)
}

/// The end of a case: time passes (timeouts, run time, time limits act on what the
/// requests left), then the master restarts from what it saved, and every saved job comes
/// back in its saved state (the restart runs recovery and the sanity check).
fn finish(mut w: World) -> Result<(), TestCaseError> {
    w.tick_after_ms(1500);
    // Orders nobody answered die with the old master; the agents re-register.
    w.fx.sent.clear();
    let saved: Vec<(u64, State)> = w.fx.db.iter().map(|(id, r)| (*id, r.state())).collect();
    let w = w.restart();
    for (id, state) in saved {
        let view = w.st.view(JobId(id), w.now);
        prop_assert_eq!(
            view.map(|v| v.state()).ok(),
            Some(state),
            "job {} after a restart",
            id
        );
    }
    Ok(())
}

#[test]
fn fixture_is_as_documented() {
    let w = world();
    let states: Vec<State> = (1..=4).map(|j| w.view(j).state()).collect();
    assert_eq!(
        states,
        [
            State::Running,
            State::Running,
            State::Starting,
            State::Queued
        ]
    );
}

#[test]
#[ignore = "writes crates/gang-fuzz/corpus/proto_*"]
fn write_fuzz_corpus() {
    corpus::submit_seeds();
    corpus::client_seeds();
    corpus_agents::agent_seeds();
}
