//! MPI on this node: which MPI a rank's program links (`program`), the PMI server for
//! MPICH (`pmi`), the PMIx server for Open MPI (`pmix`), the PMPI checking libraries of
//! `prun --mpi-check` (`check`), and the trust check of the directory the libraries ranks
//! preload are installed in (`trusted_dir`). The launch decides what a rank is served
//! (`launch::mpi`); the jobs' key-value spaces carry their fences (`msg`).

pub mod check;
pub mod modex;
pub mod pmi;
pub mod pmix;
pub mod program;
pub mod trusted_dir;
