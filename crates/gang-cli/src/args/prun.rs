//! `prun`'s command line, here rather than in its binary so that `gangctl completions`
//! and `gangctl man` generate prun's from the same definitions.

use clap::Parser;
use gang_core::GangMode;

use crate::args::gang_mode;
use crate::args::parse::{parse_duration, parse_timeout};

/// Run a parallel job on the gang cluster.
///
/// prun submits CMD as a job of SHAPE nodes, relays every rank's stdout and stderr (and
/// our stdin to rank 0) until the job ends, and exits with the job's exit code: the first
/// failing rank's code, or 128+signal, naming that rank on stderr. Ctrl-C, SIGTERM or
/// SIGHUP cancel the job (a second one leaves at once); after Ctrl-C prun exits 130, as
/// srun does.
#[derive(Debug, Parser)]
#[command(
    name = "prun",
    version,
    after_help = "Examples:\n  prun -n 4x2 -- ./a.out --size 100\n  prun -N4 -t5m -J solver ./a.out    # srun's spellings work too\n  prun -n 8 --label hostname\n  prun -N 4 -n 4 hostname    # -N and -n together, as srun\n  prun -u python3 train.py   # its output line by line, as srun -u\n  prun -n 2x2 --detach --time-limit 10m -- ./long-job\n  prun -n 4x4 --gang priority -- ./solver\n  prun -n 4x4 -o %j-%r.out -- ./solver    # output to files, as sbatch -o\n\nExit status: the job's exit code; 1 if it could not run (or prun failed); 130 if\nCtrl-C cancelled it (or at a second Ctrl-C); 143 if it was cancelled otherwise\n(SIGTERM, gangctl cancel); 2 for usage errors."
)]
pub struct Args {
    /// Nodes: a submesh as WxH (e.g. 4x2) or a node count (e.g. 8); the master rounds a
    /// count to a shape and may rotate a submesh. In an allocation: of its nodes, and all
    /// of them if left out.
    #[arg(
        short = 'N',
        long = "nodes",
        value_name = "SHAPE",
        action = clap::ArgAction::Append,
        required_unless_present_any = ["ntasks", "allocation"]
    )]
    pub nodes: Vec<String>,

    /// Tasks, as srun's -n: one rank runs on each node, so the same as -N (a count or a
    /// WxH shape). Given with -N (srun -N 4 -n 4), the two must agree.
    #[arg(
        short = 'n',
        long = "ntasks",
        value_name = "SHAPE",
        action = clap::ArgAction::Append
    )]
    pub ntasks: Vec<String>,

    /// Run as a step of this allocation of yours (`gangctl alloc`, `gangctl submit`): on
    /// its nodes, at once, without queueing again (a step waits only for the allocation's
    /// other steps to leave the nodes it needs), switched with the allocation, ended with
    /// it. Set for you inside an allocation (GANG_ALLOCATION_ID); 0: a job of its own.
    #[arg(long, env = "GANG_ALLOCATION_ID", value_name = "ID")]
    pub allocation: Option<u64>,

    /// Prefix every output line with the rank that wrote it ("3: hello").
    #[arg(short = 'l', long)]
    pub label: bool,

    /// Unbuffered output, as srun -u: rank 0 runs on a pseudo-terminal (stdin, stdout and
    /// stderr), so a program that buffers its output in a pipe (C stdio, Python) writes
    /// each line as it prints it; with --label every rank does. Its stdout and stderr
    /// arrive as one stream (prun's stdout), as on a terminal.
    #[arg(short = 'u', long, conflicts_with_all = ["output", "error"])]
    pub unbuffered: bool,

    /// A pseudo-terminal for rank 0, as srun --pty (the same as -u): `tty` there prints a
    /// /dev/pts path, and isatty(3) is true; with --label, for every rank. Input is read
    /// a line at a time (as at a terminal; ^D in the input ends it), and not echoed back.
    #[arg(long, conflicts_with_all = ["output", "error"])]
    pub pty: bool,

    /// Submit, print the job id and exit; the job runs with its stdin on /dev/null.
    #[arg(short = 'd', long)]
    pub detach: bool,

    /// Cancel the job after it has run this long (it ends as `timeout`, prun exits 124):
    /// Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (a bare number is minutes),
    /// or with units: 90s, 5m, 5min, 2h, 1d, 1h30m.
    #[arg(short = 't', long, alias = "time", value_name = "DURATION", value_parser = parse_duration)]
    pub time_limit: Option<u64>,

    /// Start only after other jobs, as Slurm's --dependency: afterok:ID[:ID...] (they
    /// completed with exit 0), afternotok (they ended otherwise), afterany (they ended),
    /// after (they started); several comma-separated, all must hold. A job whose
    /// dependency can never hold ends cancelled, saying which.
    #[arg(long, value_name = "TYPE:ID,...", value_parser = parse_dependency)]
    pub dependency: Option<String>,

    /// Submit the job held: it waits, queued, until `gangctl release ID`.
    #[arg(short = 'H', long)]
    pub hold: bool,

    /// Submit a job array, one job per task index (needs --detach; prints the first id and
    /// the count): 1-100, 1,3,5-7, 0-15:4 (a step), 1-100%10 (at most 10 at once). Each
    /// task has GANG_ARRAY_TASK_ID (and GANG_ARRAY_JOB_ID, _COUNT, _MIN, _MAX) in its
    /// environment; %A and %a in --output/--error are the array's id and the task index.
    #[arg(long, value_name = "INDEXES", requires = "detach", value_parser = parse_array)]
    pub array: Option<String>,

    /// Refuse a node count that is not a rectangle of the mesh (-n 5 would run on 6, as
    /// 3x2) instead of rounding it up; without it prun says when it rounds.
    #[arg(long)]
    pub exact: bool,

    /// How the job is switched out of its time slices when the cluster time-shares the
    /// mesh; default: the cluster's (gang-master --gang-mode).
    #[arg(long, env = "GANG_MODE", value_name = "MODE", value_parser = gang_mode::parser())]
    pub gang: Option<GangMode>,

    /// What the master does if the job deadlocks (every rank blocked in a receive of the
    /// messaging library, nothing in flight): report (print it here, keep running) or kill
    /// (report, then fail the job); default: the cluster's (gang-master --on-deadlock).
    #[arg(long, value_name = "POLICY", value_parser = ["report", "kill"])]
    pub on_deadlock: Option<String>,

    /// How the messaging library keeps the job's network context across switches:
    /// resident (each job keeps its own; a switch flips a flag) or save-restore (copied
    /// out of the transport at switch-out and back in at switch-in) [default: resident].
    #[arg(long, value_name = "MODE", value_parser = ["resident", "save-restore"])]
    pub context: Option<String>,

    /// What the agents serve MPI libraries to find their peers: auto (the simple protocol,
    /// and a PMIx server for a program linked with Open MPI or a script: both MPIs run
    /// right; an Open MPI program on an agent without PMIx is refused), pmi1 or pmi2 (the
    /// simple wire protocol, PMI_FD: MPICH), pmix (a PMIx server: Open MPI; the simple
    /// protocol too) or none (ranks start as MPI singletons) [default: the cluster's, auto
    /// unless its admin chose another].
    #[arg(long, value_name = "IFACE", value_parser = ["auto", "pmi1", "pmi2", "pmix", "none"])]
    pub mpi: Option<String>,

    /// Check an MPI program for deadlock: preload a PMPI interposition library into every
    /// rank that reports blocked receives and message counts, so a deadlock is flagged
    /// (see --on-deadlock) as for programs using the messaging library.
    #[arg(long)]
    pub mpi_check: bool,

    /// Name shown by `gangctl jobs` (default: the command).
    #[arg(short = 'J', long, alias = "job-name")]
    pub name: Option<String>,

    /// The directory the ranks start in, on every node [default: the current directory].
    /// A relative one is taken from the current directory.
    #[arg(short = 'D', long, value_name = "DIR")]
    #[arg(value_hint = clap::ValueHint::DirPath)]
    pub chdir: Option<std::path::PathBuf>,

    /// Master address: unix:PATH (its socket on a cluster host) or https://HOST:PORT (with
    /// the cluster CA and a token or user certificate, see the client config); else the
    /// client config file's `master` ($GANG_CONFIG, ~/.config/gang/client.toml,
    /// /etc/gang/client.toml); else unix:/run/gang/master.sock.
    #[arg(long, env = "GANG_MASTER", value_name = "ADDR")]
    pub master: Option<String>,

    /// Say when the job starts, and how far a launch down the order tree has got while it
    /// starts ("launch 3 of 16 subtrees done, 192 of 1024 ranks started"), on stderr.
    /// Without it prun still says why a job waits if it is queued for more than a second,
    /// and when it starts then.
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Do not print the line that names the failing rank, its node and its exit code or
    /// signal ("prun: rank 2 on node (0,1) exited with code 3"); the exit status says it.
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Write the ranks' stdout (and stderr, unless --error) to files instead of the
    /// terminal, as sbatch -o: %j is the job id, %r the rank, %n the node (X-Y), %% a %;
    /// relative to the current directory. Each rank's agent opens it on the rank's node,
    /// as you. A file several ranks share (no %r) is appended to; one per rank starts
    /// empty.
    #[arg(short = 'o', long, value_name = "PATTERN", value_parser = parse_pattern)]
    pub output: Option<String>,

    /// Write the ranks' stderr to files (the same patterns as --output).
    #[arg(short = 'e', long, value_name = "PATTERN", value_parser = parse_pattern)]
    pub error: Option<String>,

    /// How long the master may take to accept the connection and to answer each request
    /// (the job's output streams for as long as it runs); a bare number is seconds; 0: wait forever [default: 10s].
    #[arg(long, env = "GANG_TIMEOUT", value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<u64>,

    /// The program to run on every node (looked up in PATH there) and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        num_args = 1..
    )]
    pub command: Vec<String>,
}

/// A --dependency, refused here as the master would refuse it.
pub fn parse_dependency(s: &str) -> Result<String, String> {
    gang_core::schedule::dependency::parse(s)?;
    Ok(s.to_string())
}

/// An --array, refused here as the master would (the task count's limit is the master's).
pub fn parse_array(s: &str) -> Result<String, String> {
    gang_core::schedule::array::parse(s, gang_core::schedule::array::MAX_INDEX as usize + 1)?;
    Ok(s.to_string())
}

/// An --output/--error pattern, refused here as the master would refuse it.
pub fn parse_pattern(s: &str) -> Result<String, String> {
    gang_core::job::output_pattern::validate(s)?;
    Ok(s.to_string())
}
