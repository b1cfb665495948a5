//! Real MPI programs under `prun` (issue #11): the agents serve the process-management
//! interfaces MPI libraries use to find their peers, so `prun -n WxH ./a.out` starts one
//! MPI job, which is then gang-switched like any other.

mod mpich;
mod openmpi;
mod programs;
