//! What can go wrong once a launch is planned, and the error the master sees for it. The
//! steps report only what failed; the message is worded here, once, with the plan's
//! names (the node, the program, whose credentials the child had taken on), as the pure
//! step words its refusals.

use std::io;

use super::mpi::MpiRefusal;
use super::plan::{LaunchPlan, RunAs};
use crate::error::AgentError;
use crate::launch::rank_files::FileError;
use crate::ranks::ReserveError;

#[derive(Debug)]
pub enum Failure {
    /// The (job, rank) is already here, or the agent is shutting down.
    Reserve(ReserveError),
    /// The working directory cannot be used.
    Cwd(io::Error),
    /// `prun --output/--error` names a file the rank cannot be given.
    OutputFile(FileError),
    /// The program's MPI cannot be served as the job asked, on this node.
    Mpi(MpiRefusal),
    /// Something the rank needs on this node, before its process existed.
    Start(io::Error),
    /// The spawn. It may have failed in the child after it took on the user's
    /// credentials: the error then says whose they were.
    Spawn(io::Error),
}

impl Failure {
    pub fn word(self, plan: &LaunchPlan) -> AgentError {
        let node = plan.node;
        let program = || plan.req.argv[0].clone();
        match self {
            Failure::Reserve(ReserveError::Duplicate) => AgentError::Duplicate {
                node,
                job_id: plan.req.key.job_id,
                rank: plan.req.key.rank,
            },
            Failure::Reserve(ReserveError::Closing) => AgentError::ShuttingDown { node },
            Failure::Cwd(source) => AgentError::Cwd {
                node,
                cwd: plan.req.cwd.clone(),
                source,
            },
            Failure::OutputFile((path, source)) => AgentError::OutputFile { node, path, source },
            Failure::Spawn(source) => match &plan.run_as {
                RunAs::User { uid, .. } => AgentError::SpawnAs {
                    node,
                    program: program(),
                    uid: *uid,
                    cwd: plan.req.cwd.clone(),
                    source,
                },
                RunAs::Agent => AgentError::Spawn {
                    node,
                    program: program(),
                    source,
                },
            },
            Failure::Mpi(refusal) => AgentError::Mpi {
                node,
                program: program(),
                why: refusal.to_string(),
            },
            Failure::Start(source) => AgentError::Spawn {
                node,
                program: program(),
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Coord;
    use crate::launch::plan::{LaunchPolicy, NodeFacts, plan};
    use crate::ranks::RankKey;
    use crate::request::{RankRequest, Submitter};

    fn planned(agent_uid: u32) -> LaunchPlan {
        let facts = NodeFacts {
            node: Coord { x: 1, y: 2 },
            agent_uid,
            agent_gid: 100,
            policy: LaunchPolicy::default(),
            pmix_built: true,
        };
        let req = RankRequest {
            key: RankKey { job_id: 7, rank: 3 },
            size: 4,
            argv: vec!["prog".into()],
            cwd: "/data".into(),
            submitter: Submitter {
                uid: 1000,
                gid: 100,
                ..Submitter::default()
            },
            ..RankRequest::default()
        };
        plan(req, &facts).unwrap()
    }

    fn denied() -> io::Error {
        io::Error::from_raw_os_error(libc::EACCES)
    }

    #[test]
    fn a_failed_spawn_names_the_program_and_whose_credentials_it_had() {
        assert_eq!(
            Failure::Spawn(denied()).word(&planned(0)).to_string(),
            "node (1,2): cannot start \"prog\" as uid 1000 in \"/data\": Permission denied (os error 13)"
        );
        assert_eq!(
            Failure::Spawn(denied()).word(&planned(1000)).to_string(),
            "node (1,2): cannot start \"prog\": Permission denied (os error 13)"
        );
        // Before the process existed, nothing was done as the user.
        assert_eq!(
            Failure::Start(denied()).word(&planned(0)).to_string(),
            "node (1,2): cannot start \"prog\": Permission denied (os error 13)"
        );
    }

    #[test]
    fn the_other_failures_name_what_they_are_about() {
        let p = planned(0);
        assert_eq!(
            Failure::Cwd(denied()).word(&p).to_string(),
            "node (1,2): working directory \"/data\": Permission denied (os error 13)"
        );
        assert_eq!(
            Failure::OutputFile(("/data/7.out".into(), denied()))
                .word(&p)
                .to_string(),
            "node (1,2): output file /data/7.out: Permission denied (os error 13)"
        );
        let dup = Failure::Reserve(ReserveError::Duplicate).word(&p);
        assert!(matches!(dup, AgentError::Duplicate { .. }));
        assert_eq!(
            dup.to_string(),
            "node (1,2): rank 3 of job 7 is already here"
        );
        assert_eq!(
            Failure::Reserve(ReserveError::Closing).word(&p).to_string(),
            "node (1,2): the agent is shutting down"
        );
        let mpi = Failure::Mpi(MpiRefusal {
            library: "libmpi.so.40".into(),
            choice: crate::request::Mpi::Auto,
            pmix_built: false,
        })
        .word(&p);
        assert_eq!(
            tonic::Status::from(mpi).message(),
            "node (1,2): cannot start \"prog\": it uses Open MPI (needs libmpi.so.40), which \
             needs the agent's PMIx server, and this agent was built without PMIx: install \
             libpmix-dev and rebuild"
        );
    }
}
