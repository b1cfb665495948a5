//! A Launch request in the agent's terms. `service.rs` converts the wire message once, at
//! the edge; everything behind it (the pure launch plan, the start, the supervisor) works
//! from this, so no `gang_proto` type travels through the agent with the request.

use std::collections::HashMap;

use gang_core::{GangMode, MsgContext, Submesh};

use crate::ranks::RankKey;

/// Which process-management interface the job's ranks are served (the master resolved it;
/// the agent's own copy of the master's `Mpi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mpi {
    /// The simple protocol, and the node's PMIx server for a program that may need it
    /// (`launch::mpi`): MPICH and Open MPI alike.
    Auto,
    /// The simple wire protocol (PMI-1, and PMI-2 for a client that asks): MPICH.
    #[default]
    Pmi1,
    /// The same server, named PMI-2.
    Pmi2,
    /// The node's PMIx server (Open MPI), besides the simple protocol.
    Pmix,
    /// Nothing: an MPI program starts as singletons.
    None,
}

impl Mpi {
    /// As `prun --mpi` names it.
    pub fn name(self) -> &'static str {
        match self {
            Mpi::Auto => "auto",
            Mpi::Pmi1 => "pmi1",
            Mpi::Pmi2 => "pmi2",
            Mpi::Pmix => "pmix",
            Mpi::None => "none",
        }
    }
}

/// Who submitted the job, as the master identified them (never as the request claims).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submitter {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, exactly these (empty: none).
    pub groups: Vec<u32>,
    /// The name on the master (may be empty); the uid's name here wins.
    pub user: String,
}

/// One rank to start on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankRequest {
    pub key: RankKey,
    /// Ranks in the job.
    pub size: u32,
    pub argv: Vec<String>,
    /// As the master sent it: checked to be absolute by the plan.
    pub cwd: String,
    /// The job's environment (typically the submitting shell's); empty: none given.
    pub env: HashMap<String, String>,
    pub submitter: Submitter,
    /// Whether stdin will be forwarded to this rank (else /dev/null).
    pub stdin: bool,
    /// The job's mode, for the rank's whole life.
    pub mode: GangMode,
    /// The job's rectangle (ranks row-major in it), if the master sent it.
    pub part: Option<Submesh>,
    pub msg_context: MsgContext,
    pub mpi: Mpi,
    /// `prun --mpi-check`: preload the checking library.
    pub mpi_check: bool,
    /// `prun --output/--error` patterns, unexpanded; empty: piped to the master.
    pub output: String,
    pub error: String,
    /// The job's name for MPI libraries as the master sent it (`gang-CLUSTER-JOB`);
    /// empty from an older master (see [`RankRequest::namespace`]).
    pub namespace: String,
    /// Fences among the job's agents (None: through the master).
    pub fence: Option<FenceSpec>,
    /// `LaunchRequest.allocation`: its own job id for an allocation's batch script, the
    /// allocation's for a step (switched with it), 0 otherwise.
    pub allocation: u64,
    /// A batch script (its text, and where in argv its path goes): written into the
    /// rank's own directory, never passed in the command line.
    pub script: Option<(String, usize)>,
    /// Run on a pseudo-terminal (`prun -u`, `--pty`): its stdin, stdout and stderr.
    pub pty: bool,
}

/// A job's fence tree as the master set it (`gang_core::tree::fanout::links` over its ranks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceSpec {
    pub width: u32,
    /// Where the rank's parent's agent listens (empty for rank 0).
    pub parent: String,
}

impl RankRequest {
    /// The job the slice tables name this rank by: a step's allocation, else its own.
    pub fn slot_job(&self) -> u64 {
        if self.allocation != 0 {
            self.allocation
        } else {
            self.key.job_id
        }
    }

    /// The job's name for MPI libraries: PMI's kvsname and jobid, PMIx's namespace.
    pub fn namespace(&self) -> String {
        if self.namespace.is_empty() {
            format!("gang-{}", self.key.job_id)
        } else {
            self.namespace.clone()
        }
    }
}
