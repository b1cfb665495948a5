//! Real MPI programs under `prun` (issue #11): the agents serve the process-management
//! interfaces MPI libraries use to find their peers, so `prun -n WxH ./a.out` starts one
//! MPI job, which is then gang-switched like any other.

// Real throwaway users (the trust tests'): a rank of an ordinary user under PMIx.
#[allow(dead_code)]
#[path = "../trust/accounts.rs"]
mod accounts;
mod check;
mod direct_modex;
mod late_rank;
mod mpich;
mod munge;
mod openmpi;
mod pmi2;
mod pmix_gate;
mod programs;
