//! How many agents a local cluster may start.
//!
//! Every node of a local cluster is a real `gang-agent` process on this one machine, so a
//! mesh of W x H nodes is W*H processes (plus their ranks) sharing its few cores. A
//! 100x100 mesh once started more than 6,700 agents on a 2-core box before anybody could
//! stop it; the ceiling refuses such a mesh before anything starts.

use std::fmt;

/// The default ceiling: 16 to 64 agents are plenty for tests and demos on a small machine.
pub const DEFAULT_MAX_AGENTS: usize = 64;

/// The most agents any local cluster may run, however high the ceiling is set.
pub const MAX_AGENTS_BOUND: usize = 1024;

/// The most emulated nodes a local cluster may run (`LocalClusterOptions::emulate`). Not
/// a promise that so many fit: the master holds three connections a node today, so its
/// open-file limit (20,000 on this machine) is the bound in practice (README, "Emulated
/// fleets").
pub const MAX_EMULATED_NODES: u64 = 16_384;

/// The most emulated nodes one agent process runs (`gang-agent --emulate-nodes`).
pub const MAX_EMULATED_PER_PROCESS: u32 = 4096;

/// Whether an emulated `mesh`, `per_process` nodes a process, is within the bounds.
pub fn check_emulated(mesh: (u32, u32), per_process: u32) -> Result<(), String> {
    let needed = u64::from(mesh.0) * u64::from(mesh.1);
    if needed > MAX_EMULATED_NODES {
        return Err(format!(
            "a {}x{} mesh is {needed} emulated nodes; a local cluster emulates at most {MAX_EMULATED_NODES}",
            mesh.0, mesh.1
        ));
    }
    if per_process == 0 || per_process > MAX_EMULATED_PER_PROCESS {
        return Err(format!(
            "{per_process} emulated nodes a process: 1 to {MAX_EMULATED_PER_PROCESS}"
        ));
    }
    Ok(())
}

/// Why a mesh is refused before anything starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CeilingError {
    /// The mesh needs more agents than the ceiling allows.
    TooManyAgents {
        mesh: (u32, u32),
        needed: u64,
        max_agents: usize,
        cores: usize,
    },
    /// The ceiling itself is above [`MAX_AGENTS_BOUND`].
    AboveBound { max_agents: usize, cores: usize },
}

/// The cores of this machine, as the messages quote them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether a `mesh` fits under the ceiling `max_agents` (itself at most
/// [`MAX_AGENTS_BOUND`]).
pub fn check_mesh(mesh: (u32, u32), max_agents: usize) -> Result<(), CeilingError> {
    if max_agents > MAX_AGENTS_BOUND {
        return Err(CeilingError::AboveBound {
            max_agents,
            cores: cores(),
        });
    }
    let needed = u64::from(mesh.0) * u64::from(mesh.1);
    if needed > max_agents as u64 {
        return Err(CeilingError::TooManyAgents {
            mesh,
            needed,
            max_agents,
            cores: cores(),
        });
    }
    Ok(())
}

fn cores_text(n: usize) -> String {
    if n == 1 {
        "1 core".into()
    } else {
        format!("{n} cores")
    }
}

impl CeilingError {
    /// The message, naming `knob` as the way to raise the ceiling (`--max-agents` for
    /// `gangctl start`).
    pub fn message(&self, knob: &str) -> String {
        match *self {
            CeilingError::TooManyAgents {
                mesh: (w, h),
                needed,
                max_agents,
                cores,
            } => {
                let head = format!(
                    "a {w}x{h} mesh needs {needed} agents, one process per node on this machine ({})",
                    cores_text(cores)
                );
                if needed <= MAX_AGENTS_BOUND as u64 {
                    format!(
                        "{head}; the limit is {max_agents}. A local cluster is for demos and \
                         tests: use a smaller mesh, or raise the limit ({knob} {needed}, at most \
                         {MAX_AGENTS_BOUND})."
                    )
                } else {
                    format!(
                        "{head}; the limit is {max_agents} ({knob}, at most {MAX_AGENTS_BOUND}). \
                         A local cluster is for demos and tests: use a smaller mesh, or emulated \
                         nodes for a fleet test (`gangctl start --emulate`)."
                    )
                }
            }
            CeilingError::AboveBound { max_agents, cores } => format!(
                "{knob} {max_agents} is above {MAX_AGENTS_BOUND}, the most a local cluster may \
                 run: one agent process per node on this machine ({})",
                cores_text(cores)
            ),
        }
    }
}

impl fmt::Display for CeilingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message("LocalClusterOptions::max_agents"))
    }
}

impl std::error::Error for CeilingError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meshes_under_the_ceiling_pass() {
        assert_eq!(check_mesh((8, 8), DEFAULT_MAX_AGENTS), Ok(()));
        assert_eq!(check_mesh((1, 1), 1), Ok(()));
        assert_eq!(check_mesh((32, 32), MAX_AGENTS_BOUND), Ok(()));
    }

    #[test]
    fn a_huge_mesh_is_refused_with_the_numbers() {
        let e = check_mesh((100, 100), DEFAULT_MAX_AGENTS).unwrap_err();
        let text = e.message("--max-agents");
        let cores = cores_text(cores());
        assert_eq!(
            text,
            format!(
                "a 100x100 mesh needs 10000 agents, one process per node on this machine \
                 ({cores}); the limit is 64 (--max-agents, at most 1024). A local cluster is \
                 for demos and tests: use a smaller mesh, or emulated nodes for a fleet test \
                 (`gangctl start --emulate`)."
            )
        );
        // Products beyond u32 do not wrap around into a small number.
        let e = check_mesh((u32::MAX, u32::MAX), MAX_AGENTS_BOUND).unwrap_err();
        assert!(
            e.to_string().contains("needs 18446744065119617025 agents"),
            "{e}"
        );
    }

    #[test]
    fn a_mesh_the_ceiling_could_take_says_how_to_raise_it() {
        let e = check_mesh((10, 10), DEFAULT_MAX_AGENTS).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("a 10x10 mesh needs 100 agents"), "{text}");
        assert!(
            text.ends_with("raise the limit (LocalClusterOptions::max_agents 100, at most 1024)."),
            "{text}"
        );
    }

    #[test]
    fn the_ceiling_has_a_bound() {
        let e = check_mesh((1, 1), 5000).unwrap_err();
        assert!(matches!(
            e,
            CeilingError::AboveBound {
                max_agents: 5000,
                ..
            }
        ));
        assert!(
            e.message("--max-agents")
                .starts_with("--max-agents 5000 is above 1024, the most a local cluster"),
            "{e}"
        );
    }

    #[test]
    fn emulated_fleets_are_bounded_by_nodes_and_per_process() {
        assert_eq!(check_emulated((100, 100), 1024), Ok(()));
        let e = check_emulated((129, 128), 1024).unwrap_err();
        assert!(e.contains("16512 emulated nodes"), "{e}");
        assert!(check_emulated((4, 4), 0).is_err());
        let e = check_emulated((4, 4), 5000).unwrap_err();
        assert!(e.contains("1 to 4096"), "{e}");
    }
}
