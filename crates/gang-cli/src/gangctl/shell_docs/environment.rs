//! The environment variables the man pages list: those prun and gangctl read besides their
//! options' own (`--master` is also `GANG_MASTER`: those come from the clap definitions),
//! and those a job's ranks, a batch script and `gangctl alloc`'s command are given. Each
//! names the source files that read or set it, and a test holds every name to them (and
//! every GANG_* variable the launch code sets to this table), so the pages cannot drift
//! from the code.

/// One variable: its name, what it says, and the files (from the repository's root) where
/// it is read or set, each of which names it.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    pub name: &'static str,
    pub what: &'static str,
    /// Read by the tests only, which hold the table to the code.
    #[cfg_attr(not(test), allow(dead_code))]
    pub code: &'static [&'static str],
}

const COMMAND_RS: &str = "crates/gang-agent/src/launch/command.rs";
const ROLLBACK_RS: &str = "crates/gang-agent/src/launch/rollback.rs";
const ARRAY_SPEC_RS: &str = "crates/gang-master/src/job/spec.rs";
const MSG_ABI_RS: &str = "crates/gang-msg/src/abi/mod.rs";
const PMI_RS: &str = "crates/gang-agent/src/mpi/pmi/mod.rs";
const ALLOC_RS: &str = "crates/gang-cli/src/alloc.rs";
const CLIENT_CONFIG_RS: &str = "crates/gang-cli/src/connect/client_config.rs";
const LOCAL_MASTER_RS: &str = "crates/gang-local/src/driver/local_master.rs";

/// Every rank of a job finds these in its environment, set by its node's agent, over the
/// environment prun was started in (which the job takes along).
pub const RANK_ENV: &[Var] = &[
    var("GANG_JOB_ID", "the job's id", &[COMMAND_RS]),
    var(
        "GANG_RANK",
        "this rank, from 0 to GANG_SIZE - 1",
        &[COMMAND_RS],
    ),
    var(
        "GANG_SIZE",
        "how many ranks the job has (one a node)",
        &[COMMAND_RS],
    ),
    var("GANG_NODE", "this rank's node, as X,Y", &[COMMAND_RS]),
    var(
        "GANG_MESH_X",
        "this rank's node's x coordinate",
        &[COMMAND_RS],
    ),
    var(
        "GANG_MESH_Y",
        "this rank's node's y coordinate",
        &[COMMAND_RS],
    ),
    var(
        "GANG_PART",
        "the job's rectangle, x0,y0,w,h: rank r is on node (x0 + r % w, y0 + r / w)",
        &[MSG_ABI_RS],
    ),
    var(
        "GANG_ALLOCATION_ID",
        "a step's (and a batch script's) allocation, as Slurm's SLURM_JOB_ID: prun in it starts steps there",
        &[ROLLBACK_RS],
    ),
    var(
        "GANG_ARRAY_JOB_ID",
        "a job array's first job id (%A)",
        &[ARRAY_SPEC_RS],
    ),
    var(
        "GANG_ARRAY_TASK_ID",
        "the task's index in its array (%a)",
        &[ARRAY_SPEC_RS],
    ),
    var(
        "GANG_ARRAY_TASK_COUNT",
        "how many tasks the array has",
        &[ARRAY_SPEC_RS],
    ),
    var(
        "GANG_ARRAY_TASK_MIN",
        "the array's smallest index",
        &[ARRAY_SPEC_RS],
    ),
    var(
        "GANG_ARRAY_TASK_MAX",
        "the array's largest index",
        &[ARRAY_SPEC_RS],
    ),
    var(
        "GANG_MSG_DIR",
        "a directory private to the rank, where the messaging library meets its agent",
        &[MSG_ABI_RS],
    ),
    var(
        "GANG_STATE_FD",
        "the messaging library's state page, an inherited descriptor",
        &[MSG_ABI_RS],
    ),
    var(
        "GANG_HOST_ID",
        "ranks with the same id share a host (the messaging library talks over Unix sockets there)",
        &[MSG_ABI_RS],
    ),
    var(
        "GANG_MSG_CONTEXT",
        "how the messaging library keeps its context across switches (prun --context)",
        &[MSG_ABI_RS],
    ),
    var(
        "PMI_FD",
        "the rank's PMI-1 connection (MPICH), unless --mpi none or pmix; with PMI_RANK, PMI_SIZE, PMI_JOBID, PMI_APPNUM",
        &[PMI_RS],
    ),
    var("PMI_RANK", "GANG_RANK, for PMI-1", &[PMI_RS]),
    var("PMI_SIZE", "GANG_SIZE, for PMI-1", &[PMI_RS]),
];

/// A batch script (`gangctl submit`) and `gangctl alloc`'s command find these, so that prun
/// in them starts steps of their allocation.
pub const SCRIPT_ENV: &[Var] = &[
    var(
        "GANG_ALLOCATION_ID",
        "the allocation's id (as Slurm's SLURM_JOB_ID)",
        &[ROLLBACK_RS, ALLOC_RS],
    ),
    var(
        "GANG_JOB_ID",
        "the allocation's id too",
        &[COMMAND_RS, ALLOC_RS],
    ),
    var(
        "GANG_MASTER",
        "the master the allocation was asked of",
        &[ROLLBACK_RS, ALLOC_RS],
    ),
];

/// What prun and gangctl read besides their options' variables.
pub const CLIENT_ENV: &[Var] = &[
    var(
        "GANG_CONFIG",
        "the client config file [default: ~/.config/gang/client.toml, then /etc/gang/client.toml]",
        &[CLIENT_CONFIG_RS],
    ),
    var(
        "GANG_TOKEN",
        "a token to prove who you are to a TLS master [default: ~/.config/gang/token]",
        &[CLIENT_CONFIG_RS],
    ),
    var(
        "GANG_CA",
        "the cluster CA for a TLS master [default: /etc/gang/tls/ca.pem]",
        &[CLIENT_CONFIG_RS],
    ),
    var(
        "GANG_CERT",
        "a user certificate, with GANG_KEY",
        &[CLIENT_CONFIG_RS],
    ),
    var(
        "GANG_KEY",
        "the user certificate's key",
        &[CLIENT_CONFIG_RS],
    ),
    var(
        "XDG_RUNTIME_DIR",
        "where local clusters (gangctl start) are recorded, in gang/clusters [else $XDG_STATE_HOME, else ~/.local/state]: the newest is the default master",
        &[LOCAL_MASTER_RS],
    ),
];

const fn var(name: &'static str, what: &'static str, code: &'static [&'static str]) -> Var {
    Var { name, what, code }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(path: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A file's code, its tests left out.
    fn code_of(path: &str) -> String {
        let text = repo_file(path);
        match text.find("#[cfg(test)]") {
            Some(i) => text[..i].to_string(),
            None => text,
        }
    }

    #[test]
    fn every_variable_listed_is_named_by_the_code_that_sets_or_reads_it() {
        for v in RANK_ENV.iter().chain(SCRIPT_ENV).chain(CLIENT_ENV) {
            assert!(!v.code.is_empty(), "{}", v.name);
            for path in v.code {
                let code = code_of(path);
                assert!(
                    code.contains(&format!("\"{}\"", v.name)),
                    "{} is listed as set or read in {path}, which does not name it",
                    v.name
                );
            }
        }
    }

    /// The messaging library's names are constants of gang-msg: the agent must set them.
    #[test]
    fn the_messaging_librarys_variables_are_set_by_the_agent() {
        let agent = code_of("crates/gang-agent/src/msg/mod.rs");
        let abi = code_of(MSG_ABI_RS);
        for v in RANK_ENV.iter().filter(|v| v.code.contains(&MSG_ABI_RS)) {
            let decl = abi
                .lines()
                .find(|l| l.contains(&format!("= \"{}\"", v.name)))
                .unwrap_or_else(|| panic!("{} in {MSG_ABI_RS}", v.name));
            let constant = decl
                .split("const ")
                .nth(1)
                .and_then(|r| r.split(':').next())
                .unwrap_or_else(|| panic!("{decl}"));
            assert!(
                agent.contains(&format!("msg_env::{constant}")),
                "{} ({constant}) is not set by the agent",
                v.name
            );
        }
    }

    /// The other way: a variable the launch code starts to set is listed (and so shown).
    #[test]
    fn every_variable_the_launch_code_sets_is_listed() {
        let listed: Vec<&str> = RANK_ENV.iter().chain(SCRIPT_ENV).map(|v| v.name).collect();
        for path in [COMMAND_RS, ROLLBACK_RS, ARRAY_SPEC_RS, PMI_RS, ALLOC_RS] {
            let code = code_of(path);
            for piece in code.split('"').skip(1).step_by(2) {
                let is_var = (piece.starts_with("GANG_") || piece.starts_with("PMI_"))
                    && piece.len() > 5
                    && piece.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                if !is_var {
                    continue;
                }
                // PMI_JOBID and PMI_APPNUM are told with PMI_FD.
                if ["PMI_JOBID", "PMI_APPNUM"].contains(&piece) {
                    continue;
                }
                assert!(
                    listed.contains(&piece),
                    "{path} sets {piece}: list it in shell_docs/environment.rs"
                );
            }
        }
    }
}
