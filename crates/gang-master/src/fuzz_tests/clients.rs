//! Targets of the client services: JobService (`proto_submit`, `proto_cancel`,
//! `proto_get_job`, `proto_list_jobs`, `proto_watch`, `proto_attach`) and AdminService
//! (`proto_node`, for Drain and Resume). AuthService's is `tokens.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use gang_core::JobId;
use gang_proto::v1;
use proptest::collection::{hash_map, vec};
use proptest::prelude::*;
use tonic::Code;

use super::{
    coord, decode, encoded, finish, from_callers, job_id, refused, reply, saved, short_text,
    stated_uid, who, world,
};
use crate::error::MasterError;
use crate::job::State;
use crate::service::convert;
use crate::state::events::Caller;
use crate::state::reactor;
use crate::state::testkit::{World, addr, caller};
use crate::state::views::{NodeState, Rank0};

// ------------------------------------------------------------------------------- Submit

fn shape_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[1-4][xX*][1-4]",
        2 => "[1-9]|1[0-6]",
        1 => "[0-9]{1,2}[xX*][0-9]{1,2}",
        1 => "[ +-]?[0-9]{0,20}[xX]?[0-9]{0,20}",
        1 => short_text(),
    ]
}

fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z./-]{1,12}",
        1 => Just(String::new()),
        1 => "[a-z]{0,3}\0[a-z]{0,3}",
        1 => "\\PC{0,12}",
        // Around the fuzz master's argv limit (4096 bytes).
        1 => (4000usize..4200).prop_map(|n| "a".repeat(n)),
    ]
}

fn env_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Z_]{1,8}",
        1 => Just("GANG_MASTER".to_string()),
        1 => Just(String::new()),
        1 => "[A-Z]{1,3}[=\0][A-Z]{0,3}",
        1 => "\\PC{0,6}",
    ]
}

fn env_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9/:]{0,12}",
        1 => "[a-z]{0,2}\0",
        1 => "\\PC{0,8}",
        1 => (4000usize..4200).prop_map(|n| "v".repeat(n)),
    ]
}

fn job_spec() -> impl Strategy<Value = v1::JobSpec> {
    (
        shape_text(),
        prop_oneof![4 => vec("[a-z./-]{1,12}", 1..3), 1 => vec(arg(), 0..4)],
        prop_oneof![6 => Just("/tmp".to_string()), 1 => "/[a-z/]{0,12}", 1 => short_text()],
        prop_oneof![
            3 => hash_map("[A-Z_]{1,8}", "[a-z0-9/:]{0,12}", 0..3),
            1 => hash_map(env_name(), env_value(), 0..4),
        ],
        prop_oneof![Just(0u64), Just(1u64), 1u64..100_000, any::<u64>()],
        any::<bool>(),
        short_text(),
        prop_oneof![4 => 0i32..=4, 1 => any::<i32>()],
    )
        .prop_map(
            |(shape, argv, cwd, env, time_limit_s, stdin, name, gang)| v1::JobSpec {
                shape,
                argv,
                cwd,
                env,
                time_limit_s,
                stdin,
                name,
                gang,
                on_deadlock: 0,
                msg_context: 0,
                mpi: 0,
                mpi_check: false,
                output: String::new(),
                error: String::new(),
                dependency: String::new(),
                hold: false,
                array: String::new(),
                allocation: 0,
                allocate: false,
                script: String::new(),
                script_at: 0,
                pty: 0,
            },
        )
}

fn submit_request() -> impl Strategy<Value = v1::SubmitRequest> {
    (
        prop::option::weighted(0.95, job_spec()),
        stated_uid(),
        prop_oneof![6 => Just(0u32), 2 => who(), 1 => any::<u32>()],
        prop_oneof![
            6 => Just(String::new()),
            2 => who().prop_map(|u| format!("u{u}")),
            1 => short_text()
        ],
        // Retries (the same token twice) and malformed tokens.
        prop_oneof![
            4 => Just(String::new()),
            2 => prop_oneof![Just("t1".to_string()), Just("t2".to_string())],
            1 => short_text()
        ],
    )
        .prop_map(|(spec, uid, gid, user, client_token)| v1::SubmitRequest {
            spec,
            uid,
            gid,
            user,
            client_token,
        })
}

const SUBMIT_REFUSALS: &[Code] = &[
    Code::InvalidArgument,
    Code::PermissionDenied,
    Code::ResourceExhausted,
];

/// What a submission may be refused for, as its message names it.
const SUBMIT_PROBLEMS: &[&str] = &[
    "request says",
    "client_token",
    "job spec",
    "gang mode",
    "as root",
    "command",
    "environment",
    "argument",
    "working directory",
    "node",
    "shape",
    "mesh",
    "queued",
];

fn submit(w: &mut World, uid: u32, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Some(req) = decode::<v1::SubmitRequest>(bytes)? else {
        return Ok(());
    };
    let caller = caller(uid);
    let job = match convert::new_job(req.clone(), &caller) {
        Ok(job) => job,
        Err(e) => return refused(e, SUBMIT_REFUSALS, SUBMIT_PROBLEMS),
    };
    // The edge takes identity from the connection and everything else as asked.
    let spec = req.spec.expect("converted requests have a spec");
    let gid = if req.gid == 0 {
        caller.owner.gid
    } else {
        req.gid
    };
    prop_assert_eq!((job.owner.uid, job.owner.gid), (caller.owner.uid, gid));
    prop_assert_eq!(&job.owner.user, &caller.owner.user);
    prop_assert_eq!(
        (&job.argv, &job.cwd, &job.shape),
        (&spec.argv, &spec.cwd, &spec.shape)
    );
    let env: BTreeMap<String, String> = spec.env.into_iter().collect();
    prop_assert_eq!(&job.env, &env);
    // A token already used by this caller: the retry gets the first job back, unchanged.
    if let Some(first) = job
        .client_token
        .as_deref()
        .and_then(|t| w.st.job_by_token(job.owner.uid, t))
    {
        let before = saved(w);
        let view = w
            .step(|st, fx, now| reactor::on_submit(st, fx, now, job.clone()))
            .map_err(|e| TestCaseError::fail(format!("a retry was refused: {e}")))?;
        prop_assert_eq!(view.id, first);
        prop_assert_eq!(saved(w), before, "a retry changed what is saved");
        return Ok(());
    }
    let (before, gauges) = (saved(w), w.st.gauges());
    match w.step(|st, fx, now| reactor::on_submit(st, fx, now, job.clone())) {
        Err(e) => {
            refused(e, SUBMIT_REFUSALS, SUBMIT_PROBLEMS)?;
            prop_assert_eq!(saved(w), before, "a refused job changed what is saved");
            prop_assert_eq!(w.st.gauges(), gauges, "a refused job changed the master");
        }
        Ok(view) => {
            prop_assert!(
                matches!(view.state(), State::Queued | State::Starting),
                "{view:?}"
            );
            prop_assert_eq!(
                (view.owner.uid, view.owner.gid, &view.owner.user),
                (job.owner.uid, gid, &job.owner.user)
            );
            prop_assert_eq!(
                (&view.argv, &view.cwd, &view.shape),
                (&job.argv, &job.cwd, &job.shape)
            );
            prop_assert!(
                view.w >= 1 && view.h >= 1 && view.w.max(view.h) <= 4,
                "{view:?}"
            );
            // Durable before the caller hears of it.
            let rec = w.fx.db.get(&view.id.0).expect("an accepted job is saved");
            prop_assert_eq!((&rec.argv, &rec.env), (&job.argv, &job.env));
            let mut rank_env = job.env.clone();
            rank_env.remove("GANG_MASTER");
            for (_, order) in w.fx.take_launches(view.id) {
                prop_assert_eq!((&order.argv, &order.env), (&job.argv, &rank_env));
                prop_assert_eq!((order.owner.uid, order.owner.gid), (job.owner.uid, gid));
            }
            reply(&v1::SubmitResponse {
                array_tasks: view.array_tasks,
                job: Some(convert::job_info(&view)),
            })?;
        }
    }
    Ok(())
}

#[test]
fn fuzz_proto_submit() {
    let input = from_callers("proto_submit", submit_request());
    gang_fuzz::run("proto_submit", 150, input, |reqs| {
        let mut w = world();
        for (uid, bytes) in &reqs {
            submit(&mut w, *uid, bytes)?;
        }
        finish(w)?;
        Ok(reqs.len() as u64)
    });
}

// ------------------------------------------------------------------------------- Cancel

fn cancel(w: &mut World, uid: u32, bytes: &[u8]) -> Result<(), TestCaseError> {
    let Some(req) = decode::<v1::CancelRequest>(bytes)? else {
        return Ok(());
    };
    let caller = caller(uid);
    let before = w.st.view(JobId(req.job_id), w.now).ok();
    let done = convert::check_stated_uid(req.uid, &caller).and_then(|()| {
        w.step(|st, fx, now| reactor::on_cancel(st, fx, now, JobId(req.job_id), &caller))
    });
    match done {
        Err(e) => {
            // Only a job that has ended is refused for being over.
            let ended = before.as_ref().is_some_and(|b| b.state().is_final());
            let over = matches!(e, MasterError::AlreadyEnded { .. });
            prop_assert!(!over || ended, "{e} for a job that had not ended");
            refused(
                e,
                &[
                    Code::PermissionDenied,
                    Code::NotFound,
                    Code::FailedPrecondition,
                ],
                &["request says", "unknown job", "may not cancel", "already"],
            )
        }
        Ok(view) => {
            let before = before.expect("only a known job is cancelled");
            prop_assert_eq!(view.id.0, req.job_id);
            prop_assert!(
                caller.may_act_on(view.owner.uid),
                "{uid} cancelled job {}",
                view.id
            );
            match before.state() {
                // Queued: gone at once. Placed: its ranks are told to stop.
                State::Queued => prop_assert_eq!(view.state(), State::Cancelled),
                State::Starting | State::Running => prop_assert!(!view.state().is_final()),
                s => prop_assert!(false, "job {} cancelled when already {s:?}", view.id),
            }
            reply(&v1::CancelResponse {
                job: Some(convert::job_info(&view)),
            })
        }
    }
}

fn cancel_request() -> impl Strategy<Value = v1::CancelRequest> {
    (job_id(), stated_uid()).prop_map(|(job_id, uid)| v1::CancelRequest { job_id, uid })
}

#[test]
fn fuzz_proto_cancel() {
    let input = from_callers("proto_cancel", cancel_request());
    gang_fuzz::run("proto_cancel", 150, input, |reqs| {
        let mut w = world();
        for (uid, bytes) in &reqs {
            cancel(&mut w, *uid, bytes)?;
        }
        finish(w)?;
        Ok(reqs.len() as u64)
    });
}

// ------------------------------------------------- GetJob, Watch, Attach: naming one job

/// The fixture, built once for targets that only read it.
fn shared_world() -> Arc<World> {
    Arc::new(world())
}

/// `GetJob`, and the check `Watch` and `Attach` make before they follow a job.
fn get_job(w: &World, caller: &Caller, id: u64) -> Result<Option<v1::JobInfo>, TestCaseError> {
    match w.st.view_for(caller, JobId(id), w.now) {
        Ok(view) => {
            prop_assert_eq!(view.id.0, id);
            prop_assert!(caller.may_act_on(view.owner.uid));
            let info = convert::job_info(&view);
            reply(&info)?;
            Ok(Some(info))
        }
        Err(e) => {
            refused(
                e,
                &[Code::NotFound, Code::PermissionDenied],
                &["unknown job", "may not see"],
            )?;
            Ok(None)
        }
    }
}

#[test]
fn fuzz_proto_get_job() {
    let input = from_callers(
        "proto_get_job",
        job_id().prop_map(|job_id| v1::GetJobRequest { job_id }),
    );
    let w = shared_world();
    gang_fuzz::run("proto_get_job", 400, input, move |reqs| {
        for (uid, bytes) in &reqs {
            if let Some(req) = decode::<v1::GetJobRequest>(bytes)? {
                get_job(&w, &caller(*uid), req.job_id)?;
            }
        }
        Ok(reqs.len() as u64)
    });
}

#[test]
fn fuzz_proto_watch() {
    let input = from_callers(
        "proto_watch",
        job_id().prop_map(|job_id| v1::WatchRequest { job_id }),
    );
    let w = shared_world();
    gang_fuzz::run("proto_watch", 400, input, move |reqs| {
        for (uid, bytes) in &reqs {
            // 0 watches every job (the caller's own, or all for an admin): nothing to check.
            if let Some(req) = decode::<v1::WatchRequest>(bytes)?.filter(|r| r.job_id != 0) {
                get_job(&w, &caller(*uid), req.job_id)?;
            }
        }
        Ok(reqs.len() as u64)
    });
}

fn attach_request() -> impl Strategy<Value = v1::AttachRequest> {
    (job_id(), vec(any::<u8>(), 0..64), any::<bool>()).prop_map(|(job_id, stdin, stdin_eof)| {
        v1::AttachRequest {
            job_id,
            stdin,
            stdin_eof,
            no_follow: false,
        }
    })
}

#[test]
fn fuzz_proto_attach() {
    let input = from_callers("proto_attach", attach_request());
    let w = shared_world();
    gang_fuzz::run("proto_attach", 400, input, move |reqs| {
        for (uid, bytes) in &reqs {
            let Some(req) = decode::<v1::AttachRequest>(bytes)? else {
                continue;
            };
            // The first message names the job; stdin goes to where its rank 0 runs.
            let Some(info) = get_job(&w, &caller(*uid), req.job_id)? else {
                continue;
            };
            let final_state = v1::JobState::try_from(info.state).is_ok_and(|s| s.is_final());
            match w.st.rank0(JobId(req.job_id)) {
                Ok(Rank0::Running(node, address)) => prop_assert_eq!(address, addr(node)),
                Ok(Rank0::Ended) => prop_assert!(final_state),
                Ok(Rank0::NotYet) => prop_assert!(!final_state),
                Err(e) => prop_assert!(false, "a job just seen is unknown: {e}"),
            }
            let forwarded = v1::StdinRequest {
                job_id: req.job_id,
                data: req.stdin.clone(),
                eof: req.stdin_eof,
            };
            reply(&forwarded)?;
        }
        Ok(reqs.len() as u64)
    });
}

// ------------------------------------------------------------------------------- ListJobs

fn list_request() -> impl Strategy<Value = v1::ListJobsRequest> {
    (
        vec(prop_oneof![4 => 0i32..=7, 1 => any::<i32>()], 0..4),
        prop_oneof![Just(0u32), 1u32..=5, any::<u32>()],
        prop_oneof![Just(0u64), 1u64..=8, any::<u64>()],
    )
        .prop_map(|(states, limit, before_id)| v1::ListJobsRequest {
            states,
            limit,
            before_id,
        })
}

#[test]
fn fuzz_proto_list_jobs() {
    let input = from_callers("proto_list_jobs", list_request());
    let w = shared_world();
    gang_fuzz::run("proto_list_jobs", 400, input, move |reqs| {
        for (uid, bytes) in &reqs {
            let Some(req) = decode::<v1::ListJobsRequest>(bytes)? else {
                continue;
            };
            let filter = match convert::list_filter(req.clone()) {
                Ok(f) => f,
                Err(e) => {
                    refused(e, &[Code::InvalidArgument], &["job state"])?;
                    continue;
                }
            };
            prop_assert_eq!(filter.states.len(), req.states.len());
            let caller = caller(*uid);
            let listed = w.st.list_for(&caller, &filter, w.now);
            let jobs = &listed.views;
            let limit = if req.limit == 0 {
                1000
            } else {
                (req.limit as usize).min(1000)
            };
            prop_assert!(jobs.len() <= limit);
            prop_assert!(jobs.windows(2).all(|p| p[0].id > p[1].id), "newest first");
            for j in jobs {
                prop_assert!(caller.may_act_on(j.owner.uid), "{uid} sees job {}", j.id);
                prop_assert!(filter.states.is_empty() || filter.states.contains(&j.state()));
                prop_assert!(
                    req.before_id == 0 || j.id.0 < req.before_id,
                    "a page goes on"
                );
            }
            let page = convert::list_page(jobs, listed.more);
            prop_assert!(
                prost::Message::encoded_len(&page) <= convert::LIST_PAGE_BYTES + (512 << 10),
                "a page stays within its budget"
            );
            reply(&page)?;
        }
        Ok(reqs.len() as u64)
    });
}

// ------------------------------------------------------------------------ Drain, Resume

fn node_request() -> impl Strategy<Value = v1::NodeRequest> {
    (coord(), coord()).prop_map(|(x, y)| v1::NodeRequest { x, y })
}

#[test]
fn fuzz_proto_node() {
    let input = vec(
        (who(), any::<bool>(), encoded("proto_node", node_request())),
        1..=4,
    );
    gang_fuzz::run("proto_node", 150, input, |reqs| {
        let mut w = world();
        for (uid, drain, bytes) in &reqs {
            let Some(req) = decode::<v1::NodeRequest>(bytes)? else {
                continue;
            };
            let by = caller(*uid);
            let node = (req.x, req.y);
            match w.step(|st, fx, now| reactor::on_set_drained(st, fx, now, node, *drain, &by)) {
                Err(e) => refused(
                    e,
                    &[Code::PermissionDenied, Code::NotFound],
                    &["admins only", "not on the"],
                )?,
                Ok(view) => {
                    prop_assert!(by.admin, "{uid} drained or resumed a node");
                    prop_assert_eq!(view.node, node);
                    let want = if *drain {
                        NodeState::Drained
                    } else {
                        NodeState::Up
                    };
                    prop_assert_eq!(view.state, want);
                    reply(&v1::NodeResponse {
                        node: Some(convert::node_info(&view)),
                    })?;
                }
            }
        }
        finish(w)?;
        Ok(reqs.len() as u64)
    });
}
