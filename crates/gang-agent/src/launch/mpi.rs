//! The launch's second pure step: what the rank is served for MPI, from the job's choice,
//! this node's build and what its program links (`lookup` reads the file and passes the
//! answer in). No I/O, so every refusal is tested here.
//!
//! `auto` serves what the program needs: the simple protocol always (a socketpair: it
//! costs nothing until a client speaks), and the node's PMIx server where the program
//! may need it (Open MPI, or a script or launcher that may run it). A plain program
//! (`hostname`, `date`) is registered with nothing, so its launch stays as fast as
//! before. An Open MPI program that cannot be served is refused rather than started as
//! singletons: Open MPI without a PMIx server runs each rank as a job of one, and exits
//! 0, saying nothing. For a script PMIx is a guess, so a registration that fails there
//! is logged and the rank runs without it: a guess never fails a job that ran before.

use gang_mpi_check::Impl;

use super::plan::{LaunchPlan, NodeFacts, RunAs};
use crate::mpi::check as mpi_check;
use crate::mpi::pmi::PmiJob;
use crate::mpi::pmix::{PmixLaunch, open_mpi_defaults};
use crate::mpi::program::ProgramMpi;
use crate::request::Mpi;

/// What a rank is served for MPI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiPlan {
    /// The simple protocol's socket, unless the job said `--mpi none`.
    pub pmi: Option<PmiJob>,
    /// The PMIx registration, if the rank gets one.
    pub pmix: Option<PmixPlan>,
    /// The `--mpi-check` library's build, if the job asked for the check.
    pub check: Option<Impl>,
}

/// A rank's PMIx registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixPlan {
    pub launch: PmixLaunch,
    /// The Open MPI settings that go with it (`pmix::open_mpi_defaults`).
    pub open_mpi: Vec<(String, String)>,
    /// Whether the launch fails if it cannot be made: for `--mpi pmix` and an Open MPI
    /// program, not for a script under `auto`.
    pub required: bool,
}

/// Why an Open MPI program cannot be started as the job asked, on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiRefusal {
    /// The Open MPI library the program needs.
    pub library: String,
    /// The job's choice: `auto`, `pmi1` or `pmi2`.
    pub choice: Mpi,
    pub pmix_built: bool,
}

impl std::fmt::Display for MpiRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let not_built = gang_pmix::Error::NotBuilt;
        write!(f, "it uses Open MPI (needs {}), which ", self.library)?;
        match (self.choice, self.pmix_built) {
            (Mpi::Auto | Mpi::Pmix, _) => {
                write!(f, "needs the agent's PMIx server, and {not_built}")
            }
            (choice, true) => write!(
                f,
                "finds its peers only through PMIx and would start as singletons under \
                 --mpi {}: run it with --mpi auto or --mpi pmix",
                choice.name()
            ),
            (choice, false) => write!(
                f,
                "finds its peers only through PMIx and would start as singletons under \
                 --mpi {}, and {not_built}",
                choice.name()
            ),
        }
    }
}

/// Decide what the planned rank is served, now that its program is known.
pub fn serve(
    plan: &LaunchPlan,
    program: &ProgramMpi,
    facts: &NodeFacts,
) -> Result<MpiPlan, MpiRefusal> {
    let req = &plan.req;
    let refuse = |library: &String| MpiRefusal {
        library: library.clone(),
        choice: req.mpi,
        pmix_built: facts.pmix_built,
    };
    // Some(required) where the rank gets PMIx.
    let pmix = match (req.mpi, program) {
        // The user's explicit choice: nothing is checked.
        (Mpi::None, _) => None,
        // Refused by `plan` on an agent built without PMIx.
        (Mpi::Pmix, _) => Some(true),
        (Mpi::Pmi1 | Mpi::Pmi2, ProgramMpi::OpenMpi(lib)) => return Err(refuse(lib)),
        (Mpi::Pmi1 | Mpi::Pmi2, _) => None,
        (Mpi::Auto, ProgramMpi::OpenMpi(lib)) if !facts.pmix_built => return Err(refuse(lib)),
        (Mpi::Auto, ProgramMpi::OpenMpi(_)) => Some(true),
        // A script or launcher on an agent without PMIx: it may run MPICH, which the
        // simple protocol serves; what it runs of Open MPI cannot be seen from here.
        (Mpi::Auto, ProgramMpi::Unseen(_)) => facts.pmix_built.then_some(false),
        (Mpi::Auto, ProgramMpi::Mpich(_) | ProgramMpi::NoMpi) => None,
    };
    let pmi = (req.mpi != Mpi::None).then(|| PmiJob {
        key: req.key,
        size: req.size,
        namespace: req.namespace(),
    });
    let pmix = pmix.map(|required| {
        let (uid, gid) = match plan.run_as {
            RunAs::User { uid, gid, .. } => (uid, gid),
            RunAs::Agent => (facts.agent_uid, facts.agent_gid),
        };
        let launch = PmixLaunch {
            key: req.key,
            nspace: req.namespace(),
            size: req.size,
            part: req.part.map(|p| (p.x, p.y, p.w, p.h)),
            uid,
            gid,
        };
        PmixPlan {
            launch,
            open_mpi: open_mpi_defaults(&req.env),
            required,
        }
    });
    Ok(MpiPlan {
        pmi,
        pmix,
        check: req
            .mpi_check
            .then(|| mpi_check::implementation(req.mpi, program)),
    })
}

#[cfg(test)]
mod tests {
    use gang_core::Submesh;

    use super::*;
    use crate::error::Coord;
    use crate::launch::plan::{LaunchPolicy, plan};
    use crate::mpi::program::Unseen;
    use crate::ranks::RankKey;
    use crate::request::{RankRequest, Submitter};

    fn facts(pmix_built: bool) -> NodeFacts {
        NodeFacts {
            node: Coord { x: 0, y: 0 },
            agent_uid: 1000,
            agent_gid: 100,
            policy: LaunchPolicy::default(),
            pmix_built,
        }
    }

    fn planned(mpi: Mpi) -> LaunchPlan {
        let req = RankRequest {
            key: RankKey { job_id: 7, rank: 3 },
            size: 4,
            argv: vec!["./a.out".into()],
            cwd: "/data".into(),
            submitter: Submitter {
                uid: 1000,
                gid: 100,
                ..Submitter::default()
            },
            part: Some(Submesh::new(0, 2, 2, 2)),
            mpi,
            ..RankRequest::default()
        };
        plan(req, &facts(true)).unwrap()
    }

    fn open_mpi() -> ProgramMpi {
        ProgramMpi::OpenMpi("libmpi.so.40".into())
    }

    fn mpich() -> ProgramMpi {
        ProgramMpi::Mpich("libmpich.so.12".into())
    }

    fn script() -> ProgramMpi {
        ProgramMpi::Unseen(Unseen::Script)
    }

    /// Whether the rank gets the simple protocol and PMIx.
    fn served(mpi: Mpi, program: &ProgramMpi, pmix_built: bool) -> (bool, bool) {
        let p = serve(&planned(mpi), program, &facts(pmix_built)).unwrap();
        (p.pmi.is_some(), p.pmix.is_some())
    }

    /// Whether the rank's PMIx registration must succeed for it to start.
    fn required(mpi: Mpi, program: &ProgramMpi) -> bool {
        let p = serve(&planned(mpi), program, &facts(true)).unwrap();
        p.pmix.unwrap().required
    }

    fn refusal(mpi: Mpi, program: &ProgramMpi, pmix_built: bool) -> String {
        serve(&planned(mpi), program, &facts(pmix_built))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn auto_registers_with_pmix_only_what_may_need_it() {
        for program in [open_mpi(), script()] {
            assert_eq!(served(Mpi::Auto, &program, true), (true, true), "{program}");
        }
        let launcher = ProgramMpi::Unseen(Unseen::Launcher("python3".into()));
        assert_eq!(served(Mpi::Auto, &launcher, true), (true, true));
        // Plain programs and MPICH: the simple protocol only, nothing registered.
        for program in [ProgramMpi::NoMpi, mpich()] {
            assert_eq!(
                served(Mpi::Auto, &program, true),
                (true, false),
                "{program}"
            );
        }
        // A guess does not fail the launch; Open MPI and the user's word do.
        assert!(!required(Mpi::Auto, &script()));
        assert!(!required(Mpi::Auto, &launcher));
        assert!(required(Mpi::Auto, &open_mpi()));
        assert!(required(Mpi::Pmix, &script()));
    }

    #[test]
    fn auto_without_pmix_serves_all_but_open_mpi_with_the_simple_protocol() {
        for program in [ProgramMpi::NoMpi, mpich(), script()] {
            assert_eq!(
                served(Mpi::Auto, &program, false),
                (true, false),
                "{program}"
            );
        }
        assert_eq!(
            refusal(Mpi::Auto, &open_mpi(), false),
            "it uses Open MPI (needs libmpi.so.40), which needs the agent's PMIx server, \
             and this agent was built without PMIx: install libpmix-dev and rebuild"
        );
    }

    #[test]
    fn the_simple_protocol_refuses_an_open_mpi_program_naming_the_fix() {
        for mpi in [Mpi::Pmi1, Mpi::Pmi2] {
            let name = mpi.name();
            assert_eq!(
                refusal(mpi, &open_mpi(), true),
                format!(
                    "it uses Open MPI (needs libmpi.so.40), which finds its peers only \
                     through PMIx and would start as singletons under --mpi {name}: run it \
                     with --mpi auto or --mpi pmix"
                )
            );
            assert_eq!(
                refusal(mpi, &open_mpi(), false),
                format!(
                    "it uses Open MPI (needs libmpi.so.40), which finds its peers only \
                     through PMIx and would start as singletons under --mpi {name}, and \
                     this agent was built without PMIx: install libpmix-dev and rebuild"
                )
            );
            // What it cannot see, it does not refuse.
            assert_eq!(served(mpi, &script(), true), (true, false));
        }
    }

    #[test]
    fn mpich_runs_under_every_choice_but_none_and_none_is_never_checked() {
        for mpi in [Mpi::Auto, Mpi::Pmi1, Mpi::Pmi2, Mpi::Pmix] {
            assert!(served(mpi, &mpich(), true).0, "{mpi:?}");
        }
        assert_eq!(served(Mpi::Pmix, &mpich(), true), (true, true));
        for program in [open_mpi(), mpich(), ProgramMpi::NoMpi] {
            assert_eq!(served(Mpi::None, &program, false), (false, false));
        }
        // --mpi pmix is the user's word: a plain program is registered too.
        assert_eq!(served(Mpi::Pmix, &ProgramMpi::NoMpi, true), (true, true));
    }

    #[test]
    fn the_registration_is_the_ranks_job_and_user() {
        let p = serve(&planned(Mpi::Auto), &open_mpi(), &facts(true)).unwrap();
        let PmixPlan {
            launch, open_mpi, ..
        } = p.pmix.unwrap();
        // An unprivileged agent's ranks are its own.
        assert_eq!((launch.uid, launch.gid), (1000, 100));
        assert_eq!(launch.key, RankKey { job_id: 7, rank: 3 });
        assert_eq!((launch.size, launch.part), (4, Some((0, 2, 2, 2))));
        assert_eq!(open_mpi, [("JSM_JSRUN_PORT".into(), "0".into())]);
        assert_eq!(p.pmi.unwrap().size, 4);
        assert_eq!(p.check, None);
    }

    #[test]
    fn the_checking_library_follows_the_program_under_auto_and_the_choice_otherwise() {
        let check = |mpi, program: &ProgramMpi| {
            let mut plan = planned(mpi);
            plan.req.mpi_check = true;
            serve(&plan, program, &facts(true)).unwrap().check.unwrap()
        };
        assert_eq!(check(Mpi::Auto, &open_mpi()), Impl::OpenMpi);
        assert_eq!(check(Mpi::Auto, &mpich()), Impl::Mpich);
        assert_eq!(check(Mpi::Auto, &script()), Impl::Mpich);
        assert_eq!(check(Mpi::Pmix, &mpich()), Impl::OpenMpi);
        assert_eq!(check(Mpi::Pmi1, &script()), Impl::Mpich);
        assert_eq!(check(Mpi::None, &open_mpi()), Impl::Mpich);
    }
}
