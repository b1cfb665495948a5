//! The pure step of a launch: a request and the node's standing facts in, a plan or the
//! request's refusal out. No I/O and no clock, so every refusal and every decision is
//! tested here directly; what needs the node's file system, processes or password
//! database is `start`'s, done from the plan. What MPI the rank is served depends on
//! its program too: `mpi::serve`, the second pure step, once `lookup` has read it.

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{AgentError, Coord};
use crate::launch::env_policy::valid_env_name;
use crate::msg::MsgLaunch;
use crate::request::{Mpi, RankRequest};

/// Most ranks a job may have, as a Launch request states them: far beyond any mesh, yet a
/// bound on what a rank's registration builds per rank (the PMIx node map).
pub const MAX_RANKS: u32 = 1 << 20;
/// The longest job namespace accepted (PMIx allows 255 bytes).
pub const MAX_NAMESPACE: usize = 200;

/// What Launch requests this node accepts (the agent's configuration).
#[derive(Debug, Clone, Default)]
pub struct LaunchPolicy {
    /// Whether ranks may run as root (uid 0).
    pub allow_root: bool,
    /// Variables of `env_policy::DROPPED_ENV` to pass on all the same.
    pub env_allow: BTreeSet<String>,
    /// An emulated node (`--emulate`): ranks are played by tasks (`emulate/played.rs`), no
    /// process is started.
    pub emulate: bool,
}

/// What the plan needs to know of this node, fixed when the agent starts.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub node: Coord,
    /// The agent's effective uid and gid: a root agent runs ranks as their submitters.
    pub agent_uid: u32,
    pub agent_gid: u32,
    pub policy: LaunchPolicy,
    /// Whether this agent was built with the PMIx server (`gang_pmix::AVAILABLE`).
    pub pmix_built: bool,
}

/// Whose credentials the rank runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The agent's own.
    Agent,
    /// Switch to these in the child (the agent is root): supplementary groups, then gid,
    /// then uid.
    User {
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
    },
}

/// Why a rank may not run with the requested credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// uid 0, and the agent does not allow root ranks.
    Root,
    /// Another uid than the agent's, and the agent (running as this uid) is not root.
    NotRoot { agent: u32 },
}

/// Decide the rank's credentials. A root agent runs ranks as the submitting user, with
/// the groups the master identified; root itself only where the agent allows it (a job
/// as root is the whole node's, and its submitter's identity is only as good as the
/// master's word). An unprivileged agent (a personal test cluster) can only run ranks as
/// itself, and says so rather than silently running someone's job under the wrong
/// account.
pub fn run_as(
    agent_uid: u32,
    allow_root: bool,
    uid: u32,
    gid: u32,
    groups: &[u32],
) -> Result<RunAs, Refusal> {
    if uid == 0 && !allow_root {
        Err(Refusal::Root)
    } else if agent_uid == 0 {
        Ok(RunAs::User {
            uid,
            gid,
            groups: groups.to_vec(),
        })
    } else if uid == agent_uid {
        Ok(RunAs::Agent)
    } else {
        Err(Refusal::NotRoot { agent: agent_uid })
    }
}

/// Where argv[0] is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchPath {
    /// The request's PATH.
    Request(String),
    /// A request with no environment runs with the default PATH: argv[0] is looked up
    /// there too, not in the agent's own.
    Default,
    /// The agent's own PATH (read when the rank starts).
    Agent,
}

/// A launch, decided: the request and everything the start does for it.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// Validated: a program, an absolute working directory, valid variable names.
    pub req: RankRequest,
    pub node: Coord,
    pub run_as: RunAs,
    pub search: SearchPath,
    /// The messaging library's directory and socket (every rank gets them).
    pub msg: MsgLaunch,
}

/// Check a request and decide how to start it. Refusals are the request's (invalid,
/// credentials the node will not take, an MPI this build cannot serve): nothing is taken
/// for a request refused here.
pub fn plan(req: RankRequest, facts: &NodeFacts) -> Result<LaunchPlan, AgentError> {
    let node = facts.node;
    let invalid = |what: String| AgentError::InvalidArgument { node, what };
    check_program(&req).map_err(invalid)?;
    check_job_shape(&req).map_err(invalid)?;
    check_cwd_env_and_files(&req).map_err(invalid)?;
    let run_as = credentials(&req, facts)?;
    if req.mpi == Mpi::Pmix && !facts.pmix_built {
        return Err(invalid(format!(
            "--mpi pmix: {}",
            gang_pmix::Error::NotBuilt
        )));
    }
    let search = search_path(&req);
    let msg = msg_launch(&req, node, &run_as);
    Ok(LaunchPlan {
        search,
        node,
        run_as,
        msg,
        req,
    })
}

/// The program to run: an argv whose strings can go to `execve`, and a batch script's
/// path slot after its interpreter.
fn check_program(req: &RankRequest) -> Result<(), String> {
    match req.argv.first() {
        None => return Err("empty argv: nothing to run".into()),
        Some(argv0) if argv0.is_empty() => return Err("argv[0] is empty".into()),
        Some(_) => {}
    }
    if let Some(i) = req.argv.iter().position(|a| a.contains('\0')) {
        return Err(format!("argv[{i}] contains a NUL byte"));
    }
    if let Some((_, at)) = &req.script
        && (*at == 0 || *at > req.argv.len())
    {
        return Err(format!(
            "a batch script's path cannot go at argv[{at}] of {} (after the interpreter)",
            req.argv.len()
        ));
    }
    Ok(())
}

/// The job as the request states it: its size, this rank within it, its namespace and
/// the rectangle that must hold its ranks.
fn check_job_shape(req: &RankRequest) -> Result<(), String> {
    if req.size == 0 || req.size > MAX_RANKS {
        return Err(format!("job size {} is outside 1..={MAX_RANKS}", req.size));
    }
    if req.key.rank >= req.size {
        return Err(format!(
            "rank {} of a job of {} ranks",
            req.key.rank, req.size
        ));
    }
    // It goes into ranks' environments and is PMIx's namespace (at most 255 bytes).
    let ns_ok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    if req.namespace.len() > MAX_NAMESPACE || !req.namespace.bytes().all(ns_ok) {
        return Err(format!(
            "namespace {:?}: at most {MAX_NAMESPACE} letters, digits, '-', '_' or '.'",
            req.namespace.chars().take(64).collect::<String>()
        ));
    }
    if let Some(p) = req.part {
        let fits = p.w > 0
            && p.h > 0
            && p.x.checked_add(p.w).is_some()
            && p.y.checked_add(p.h).is_some()
            && p.area() >= u64::from(req.size);
        if !fits {
            return Err(format!(
                "the job's rectangle {}x{} at ({},{}) cannot hold its {} ranks",
                p.w, p.h, p.x, p.y, req.size
            ));
        }
    }
    Ok(())
}

/// What the rank starts in: an absolute working directory, an environment `execve` can
/// take, and output file patterns that can become paths.
fn check_cwd_env_and_files(req: &RankRequest) -> Result<(), String> {
    if req.cwd.contains('\0') {
        return Err(format!(
            "working directory {:?} contains a NUL byte",
            req.cwd
        ));
    }
    if !Path::new(&req.cwd).is_absolute() {
        return Err(format!(
            "working directory {:?} is not an absolute path",
            req.cwd
        ));
    }
    if let Some(name) = req.env.keys().find(|k| !valid_env_name(k)) {
        return Err(format!(
            "environment variable name {name:?} is not valid (empty, or contains '=' or NUL)"
        ));
    }
    if let Some(name) = req
        .env
        .iter()
        .find(|(_, v)| v.contains('\0'))
        .map(|(k, _)| k)
    {
        return Err(format!(
            "environment variable {name}'s value contains a NUL byte"
        ));
    }
    for (what, pattern) in [("--output", &req.output), ("--error", &req.error)] {
        if pattern.contains('\0') {
            return Err(format!("{what} pattern {pattern:?} contains a NUL byte"));
        }
    }
    if req.pty && !(req.output.is_empty() && req.error.is_empty()) {
        return Err(
            "a rank on a pseudo-terminal has its output relayed: not with --output or \
                    --error files"
                .into(),
        );
    }
    Ok(())
}

/// The submitter's credentials as this node will run them, or the node's refusal.
fn credentials(req: &RankRequest, facts: &NodeFacts) -> Result<RunAs, AgentError> {
    let node = facts.node;
    let who = &req.submitter;
    run_as(
        facts.agent_uid,
        facts.policy.allow_root,
        who.uid,
        who.gid,
        &who.groups,
    )
    .map_err(|refusal| match refusal {
        Refusal::Root => AgentError::Root { node },
        Refusal::NotRoot { agent } => AgentError::Permission {
            node,
            wanted: who.uid,
            agent,
        },
    })
}

/// The messaging library's view of the rank: its key, its owner, the job's rectangle
/// (a job with none is this node alone), its context and batch script.
fn msg_launch(req: &RankRequest, node: Coord, run_as: &RunAs) -> MsgLaunch {
    let rank_uid = match run_as {
        RunAs::User { uid, gid, .. } => Some((*uid, *gid)),
        RunAs::Agent => None,
    };
    MsgLaunch {
        key: req.key,
        uid: rank_uid,
        part: match req.part {
            Some(p) => format!("{},{},{},{}", p.x, p.y, p.w, p.h),
            None => format!("{},{},1,1", node.x, node.y),
        },
        context: req.msg_context.as_str(),
        script: req.script.as_ref().map(|(text, _)| text.clone()),
    }
}

fn search_path(req: &RankRequest) -> SearchPath {
    match req.env.get("PATH") {
        Some(path) => SearchPath::Request(path.clone()),
        None if req.env.is_empty() => SearchPath::Default,
        None => SearchPath::Agent,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use gang_core::{MsgContext, Submesh};

    use super::*;
    use crate::ranks::RankKey;
    use crate::request::Submitter;

    const NODE: Coord = Coord { x: 1, y: 2 };

    fn facts(agent_uid: u32) -> NodeFacts {
        NodeFacts {
            node: NODE,
            agent_uid,
            agent_gid: 100,
            policy: LaunchPolicy::default(),
            pmix_built: true,
        }
    }

    fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn request() -> RankRequest {
        RankRequest {
            key: RankKey { job_id: 7, rank: 3 },
            size: 4,
            argv: vec!["prog".into(), "-x".into()],
            cwd: "/data".into(),
            env: env(&[
                ("PATH", "/opt/bin"),
                ("USER", "alice"),
                ("LOGNAME", "alice"),
                ("HOME", "/home/alice"),
            ]),
            submitter: Submitter {
                uid: 1000,
                gid: 100,
                groups: vec![100, 27],
                user: "alice".into(),
            },
            ..RankRequest::default()
        }
    }

    fn refusal(req: RankRequest, facts: &NodeFacts) -> String {
        plan(req, facts).unwrap_err().to_string()
    }

    #[test]
    fn the_masters_namespace_names_the_job_and_a_bad_one_is_refused() {
        let mut req = request();
        assert_eq!(req.namespace(), "gang-7");
        req.namespace = "gang-0a1b2c3d-7".into();
        assert_eq!(req.namespace(), "gang-0a1b2c3d-7");
        assert!(plan(req.clone(), &facts(0)).is_ok());
        for bad in ["gang 7", "gang-7;rm", &"x".repeat(MAX_NAMESPACE + 1)] {
            req.namespace = bad.to_string();
            assert!(
                refusal(req.clone(), &facts(0)).contains("namespace"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_request_without_a_program_or_with_a_relative_directory_is_invalid() {
        let mut r = request();
        r.argv.clear();
        assert_eq!(
            refusal(r, &facts(0)),
            "node (1,2): empty argv: nothing to run"
        );
        let mut r = request();
        r.argv[0].clear();
        assert_eq!(refusal(r, &facts(0)), "node (1,2): argv[0] is empty");
        let mut r = request();
        r.cwd = "data".into();
        let e = plan(r, &facts(0)).unwrap_err();
        assert!(matches!(e, AgentError::InvalidArgument { .. }));
        assert_eq!(
            e.to_string(),
            "node (1,2): working directory \"data\" is not an absolute path"
        );
    }

    #[test]
    fn a_variable_name_the_loader_would_misread_is_invalid() {
        let mut r = request();
        r.env.insert("LD_PRELOAD=/x.so".into(), "1".into());
        assert_eq!(
            refusal(r, &facts(0)),
            "node (1,2): environment variable name \"LD_PRELOAD=/x.so\" is not valid (empty, or contains '=' or NUL)"
        );
    }

    #[test]
    fn credentials_follow_the_agents_privilege() {
        let mut r = request();
        r.submitter.uid = 0;
        assert_eq!(
            refusal(r, &facts(0)),
            "node (1,2): will not run a rank as root (uid 0): this agent does not allow it (allow_root = false)"
        );
        assert_eq!(
            refusal(request(), &facts(1001)),
            "node (1,2): cannot run a rank as uid 1000: the agent runs as uid 1001 and is not root"
        );
        let p = plan(request(), &facts(0)).unwrap();
        assert_eq!(
            p.run_as,
            RunAs::User {
                uid: 1000,
                gid: 100,
                groups: vec![100, 27]
            }
        );
        assert_eq!(p.msg.uid, Some((1000, 100)));
        let p = plan(request(), &facts(1000)).unwrap();
        assert_eq!(p.run_as, RunAs::Agent);
        assert_eq!(p.msg.uid, None);
    }

    #[test]
    fn pmix_is_refused_where_it_is_not_built_and_auto_is_not() {
        let mut r = request();
        r.mpi = Mpi::Pmix;
        let mut without = facts(1000);
        without.pmix_built = false;
        let e = plan(r.clone(), &without).unwrap_err();
        assert!(matches!(e, AgentError::InvalidArgument { .. }));
        assert_eq!(
            e.to_string(),
            "node (1,2): --mpi pmix: this agent was built without PMIx: install libpmix-dev and rebuild"
        );
        r.part = Some(Submesh::new(0, 2, 2, 2));
        assert_eq!(plan(r.clone(), &facts(1000)).unwrap().msg.part, "0,2,2,2");
        // Whether `auto` needs PMIx depends on the program: `mpi::serve` decides.
        r.mpi = Mpi::Auto;
        plan(r, &without).unwrap();
    }

    #[test]
    fn the_messaging_library_gets_the_jobs_rectangle_or_this_node() {
        let mut r = request();
        r.msg_context = MsgContext::SaveRestore;
        let p = plan(r, &facts(0)).unwrap();
        assert_eq!(p.msg.part, "1,2,1,1");
        assert_eq!(p.msg.context, "save-restore");
        assert_eq!(p.msg.key, RankKey { job_id: 7, rank: 3 });
    }

    #[test]
    fn the_program_is_looked_up_in_the_requests_path_else_the_default_or_the_agents() {
        assert_eq!(
            plan(request(), &facts(0)).unwrap().search,
            SearchPath::Request("/opt/bin".into())
        );
        let mut r = request();
        r.env.remove("PATH");
        assert_eq!(plan(r, &facts(0)).unwrap().search, SearchPath::Agent);
        let mut r = request();
        r.env.clear();
        assert_eq!(plan(r, &facts(0)).unwrap().search, SearchPath::Default);
    }

    #[test]
    fn run_as_rules() {
        let user = |uid, gid, groups: &[u32]| RunAs::User {
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert_eq!(run_as(0, false, 0, 0, &[]), Err(Refusal::Root));
        assert_eq!(run_as(0, true, 0, 0, &[0]), Ok(user(0, 0, &[0])));
        assert_eq!(
            run_as(0, false, 1000, 100, &[100, 27]),
            Ok(user(1000, 100, &[100, 27]))
        );
        assert_eq!(run_as(1000, false, 1000, 1000, &[5]), Ok(RunAs::Agent));
        assert_eq!(
            run_as(1000, false, 1001, 1000, &[]),
            Err(Refusal::NotRoot { agent: 1000 })
        );
        assert_eq!(run_as(1000, false, 0, 0, &[]), Err(Refusal::Root));
        assert_eq!(
            run_as(1000, true, 0, 0, &[]),
            Err(Refusal::NotRoot { agent: 1000 })
        );
    }
}
