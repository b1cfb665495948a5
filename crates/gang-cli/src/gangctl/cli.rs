//! `gangctl`'s command line, here rather than in its binary so that `gangctl completions`
//! and `gangctl man` generate from the same definitions as the parser.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::args::parse::{parse_duration, parse_mesh, parse_node, parse_node_set, parse_timeout};
use crate::gangctl::shell_docs::complete as tab;
use crate::gangctl::shell_docs::job_ids::{Offer, job_ids};
use crate::jobs::job_filter;
use crate::output::OutputMode;

/// Look at and steer the gang cluster, or start a local one.
///
/// The master is found with --master or GANG_MASTER (default: its Unix socket,
/// unix:/run/gang/master.sock).
/// Results print as text, or as JSON with --output json (or GANG_OUTPUT=json).
#[derive(Debug, Parser)]
#[command(
    name = "gangctl",
    version,
    after_help = "Exit status: 0 on success, 1 on errors (printed as \"gangctl: ...\"), 2 for usage errors;\n`gangctl start -- CMD` exits with CMD's status; `gangctl start` stopped by SIGINT, SIGTERM or\nSIGHUP before its cluster is up, or while CMD runs, exits with 128+signal (130, 143, 129)."
)]
pub struct Cli {
    /// Master address: unix:PATH (its socket on a cluster host) or https://HOST:PORT (with
    /// the cluster CA and a token or user certificate, see the client config); else the
    /// client config file's `master` ($GANG_CONFIG, ~/.config/gang/client.toml,
    /// /etc/gang/client.toml); else unix:/run/gang/master.sock.
    #[arg(long, global = true, env = "GANG_MASTER", value_name = "ADDR")]
    pub master: Option<String>,

    /// How to print results: cli (text for people) or json (for programs; errors are then
    /// one {"code","message"} object a line on stderr).
    #[arg(long, global = true, env = "GANG_OUTPUT", value_enum, default_value_t = OutputMode::Cli, value_name = "MODE")]
    pub output: OutputMode,

    /// How long the master may take to accept the connection and to answer each request
    /// (streams such as attach run as long as the job does); a bare number is seconds; 0: wait forever [default: 10s].
    #[arg(long, global = true, env = "GANG_TIMEOUT", value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<u64>,

    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Start a whole cluster on this machine (loopback), like `flux start --test-size`.
    ///
    /// Runs gang-master and one gang-agent per node (binaries next to gangctl), waits until
    /// every node is up, prints `export GANG_MASTER=...`, then runs CMD with GANG_MASTER
    /// set (and gangctl's directory first in PATH, for prun) and tears the cluster down
    /// when it exits (exiting with its status), or, without CMD, waits for Ctrl-C. State
    /// and logs go to a temporary directory, removed at the end unless --keep or --dir.
    ///
    /// The address also goes to a per-user record ($XDG_RUNTIME_DIR/gang/clusters/PID, else
    /// ~/.local/state/gang/clusters/PID; removed when the cluster stops), where prun and
    /// gangctl look when neither --master, GANG_MASTER nor a client config names a master:
    /// the newest running cluster is the default, and stopping it leaves the others
    /// reachable. Without
    /// CMD the export line is printed on stdout (the only line there; messages go to
    /// stderr); with CMD, whose stdout is its own, on stderr.
    ///
    /// Every node is a process on this machine: a mesh of more than --max-agents nodes
    /// (64) is refused. SIGINT, SIGTERM or SIGHUP at any moment stop everything that was
    /// started (a Ctrl-C at the terminal while CMD runs is CMD's to handle).
    #[command(
        after_help = "Examples:\n  gangctl start --mesh 4x4\n  gangctl start --mesh 2x2 --mpl 2 -- prun -n 4 hostname\n  gangctl start --mesh 4x4 --mpl 2 --quantum-ms 100 --gang-mode priority\n  gangctl start --mesh 2x2 --agent-arg=--clock --agent-arg=host\n  gangctl start --mesh 10x10 --max-agents 100"
    )]
    Start(crate::start::StartArgs),

    /// List jobs: by default the queued, starting and running ones, newest first; with
    /// job ids, --state or --since, finished ones too (as sacct).
    ///
    /// A queued job's SUBMESH(REASON) says why it waits, as squeue's NODELIST(REASON):
    /// (waiting for node (1,0): drained), (priority): another job is ahead of it,
    /// (resources): it is next and nothing free fits it now.
    ///
    /// A step is named ALLOCATION.STEP (12.1) and listed under its allocation, an array
    /// task ARRAY_TASK (17_3); the queued tasks of an array that wait together are one
    /// line, as squeue's: 17_[4-20%4] (their indices, and %N: at most N run at once).
    #[command(
        after_help = "Examples:\n  gangctl jobs 12\n  gangctl jobs 3,5-9\n  gangctl jobs 12.1 17_3 '17_[10-20]'\n  gangctl jobs last\n  gangctl jobs --user alice --state running,PD\n  gangctl jobs --since 1h\n  gangctl jobs --since 2024-05-01T12:00"
    )]
    Jobs {
        /// Only these jobs, comma-separated: ids and ranges (3,5-9), steps (12.1), array
        /// tasks (17_3, 17_[1,3,5-7]), or `last` (your newest job that is not a step). An
        /// id, step or task that does not exist is an error; a range skips missing ones.
        #[arg(value_name = "IDS|RANGES|last", value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Any))]
        ids: Vec<String>,
        /// Also finished jobs (completed, failed, cancelled, timeout).
        #[arg(short, long)]
        all: bool,
        /// Only jobs of this user (a name or a uid).
        #[arg(short, long, value_name = "USER")]
        user: Option<String>,
        /// Only jobs in these states, comma-separated: queued (PD), starting (CF), running
        /// (R), completed (CD), failed (F), cancelled (CA), timeout (TO), or active.
        #[arg(short, long, value_name = "S,...", value_parser = job_filter::parse_state_set)]
        #[arg(add = tab::states())]
        state: Option<job_filter::States>,
        /// Only jobs submitted since T: a duration ago (1h, 30m, 2-00) or a UTC time
        /// (YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS]) or RFC 3339 (2024-05-01T12:00:00+02:00).
        #[arg(long, value_name = "T", value_parser = since_now)]
        since: Option<i64>,
        /// At most this many jobs (0: the master's limit, 1000).
        #[arg(long, default_value_t = 0, value_name = "N")]
        limit: u32,
    },

    /// Accounting, as sacct: jobs of today (UTC) in every state, or those named, with the
    /// columns of --format; JSON has every column (durations in ms, instants in Unix ns).
    ///
    /// Columns: jobid, jobname, user, state, exitcode (128+N: killed by signal N; 124:
    /// its time limit ended it), elapsed (wall time from start to end), run (time it was
    /// scheduled in its time slices), timelimit, submit, start, end, nnodes, nodelist
    /// (X-RANGE,Y-RANGE, as drain takes it), shape, reason, array (ARRAY_TASK),
    /// dependency, usercpu, systemcpu, totalcpu (CPU time of all the ranks' processes,
    /// from cgroups made for each rank), maxrss (the largest memory high-water mark of a
    /// rank), maxrssnode (sacct's MaxRSSNode: that rank's node, X,Y) and cputime (sacct's
    /// CPUTime: elapsed x nodes, a rank each); "-" where not measured. As sacct's, a column may have a
    /// width: State%20 (20 characters, right justified), JobName%-10 (left justified);
    /// a longer value is cut, its last character a `+`.
    ///
    /// An allocation (a batch job) is followed by its steps (12, 12.0, 12.1, ...; none
    /// with -X); an array task is ARRAY_TASK (17_3).
    #[command(
        after_help = "Examples:\n  gangctl acct\n  gangctl acct --since 7d --user alice\n  gangctl acct 12 -o jobid,elapsed,run,exitcode,nodelist\n  gangctl acct -j 12.1\n  gangctl acct -X -o JobID,CPUTime,MaxRSSNode,State%20\n  gangctl acct --state F,TO --output json"
    )]
    Acct {
        /// Only these jobs, comma-separated: ids and ranges (3,5-9), steps (12.1), array
        /// tasks (17_3, 17_[1-4]), or `last`.
        #[arg(value_name = "IDS|RANGES|last", value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Any))]
        ids: Vec<String>,
        /// Only these jobs (as above), as sacct's -j; may be repeated.
        #[arg(short = 'j', long = "jobs", value_name = "IDS", value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Any))]
        jobs: Vec<String>,
        /// Allocations and jobs only, without their steps (sacct's -X).
        #[arg(short = 'X', long)]
        allocations: bool,
        /// Only jobs of this user (a name or a uid).
        #[arg(short, long, value_name = "USER")]
        user: Option<String>,
        /// Only jobs in these states (as for gangctl jobs).
        #[arg(short, long, value_name = "S,...", value_parser = job_filter::parse_state_set)]
        #[arg(add = tab::states())]
        state: Option<job_filter::States>,
        /// Jobs submitted since T (as for gangctl jobs) [default: today, 00:00 UTC; with
        /// job ids: any time].
        #[arg(short = 'S', long, value_name = "T", value_parser = since_now)]
        since: Option<i64>,
        /// The columns, comma-separated, as sacct's --format (JobID,Elapsed,CPUTime,
        /// MaxRSSNode,State%20 also work).
        #[arg(short = 'o', long, value_name = "COLUMNS", default_value = crate::jobs::acct::DEFAULT_FORMAT, value_parser = crate::jobs::acct::parse_format_arg)]
        #[arg(add = tab::columns())]
        format: crate::jobs::acct::Format,
        /// At most this many jobs (0: the master's limit, 1000).
        #[arg(long, default_value_t = 0, value_name = "N")]
        limit: u32,
    },

    /// Get an allocation and run a command in it, as salloc: a shell unless CMD is given.
    ///
    /// Waits until the allocation is granted (saying why it waits after a second), then
    /// runs CMD here with GANG_ALLOCATION_ID (and GANG_MASTER) set: prun in it starts steps
    /// on the allocation's nodes at once, without queueing again; a step waits only for
    /// the nodes another step holds. The allocation is placed and gang-switched as one
    /// job, steps and all. CMD's exit ends it (gangctl exits with CMD's status); its end
    /// (time limit, `gangctl cancel`) stops CMD and its steps.
    #[command(
        after_help = "Examples:\n  gangctl alloc -n 2x2\n  gangctl alloc -n 4x4 -t 1h -- ./workflow.sh\n  gangctl alloc -n 2x2 -- sh -c 'prun -n 2 ./prep && prun ./solve'"
    )]
    Alloc {
        #[command(flatten)]
        opts: crate::batch::AllocOptions,
        /// The command to run in the allocation, here [default: $SHELL].
        #[arg(value_name = "CMD", trailing_var_arg = true, num_args = 0..)]
        command: Vec<String>,
    },

    /// Submit a batch script, as sbatch: `#GANG` lines before its first command hold
    /// options (those of the command line win), and the script runs once, as you, on the
    /// allocation's first node, its output in gang-%j.out unless -o.
    ///
    /// prun in the script starts steps on the allocation's nodes (all of them unless -n),
    /// at once, one after another or side by side; the allocation ends with the script,
    /// its exit code the script's. The script runs as `INTERPRETER -c SCRIPT NAME ARGS`
    /// (its #! line names a shell that takes -c: sh, bash, dash, zsh, ksh; default
    /// /bin/sh), at most 128 KiB.
    ///
    /// Without -N (or -n) on the command line or in a `#GANG` line it runs on one node, as
    /// sbatch. Its `srun` lines are named on stderr (steps here are started with prun),
    /// and the script is submitted all the same.
    #[command(
        after_help = "Example script:\n  #!/bin/bash\n  #GANG -n 4x4 -t 2h\n  #GANG -J solver -o solver-%j.log\n  prun -n 2x2 ./prepare\n  prun ./solve     # the whole allocation\n\nExamples:\n  gangctl submit job.sh\n  gangctl submit -n 2x2 --dependency afterok:12 job.sh input.dat\n  gangctl submit -N 1 --wrap 'prun hostname'\n  gangctl submit --parsable job.sh"
    )]
    Submit {
        #[command(flatten)]
        opts: crate::batch::BatchOptions,
        /// Print only the job id.
        #[arg(long)]
        parsable: bool,
        /// Run this command line as the script (`sh -c`), as sbatch --wrap.
        #[arg(long, value_name = "CMD", conflicts_with = "script")]
        wrap: Option<String>,
        /// The script.
        #[arg(value_name = "SCRIPT", required_unless_present = "wrap")]
        script: Option<PathBuf>,
        /// Arguments of the script ($1, $2, ...).
        #[arg(value_name = "ARGS", trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },

    /// Show one job (an allocation: with its steps), as scontrol show job.
    #[command(
        after_help = "Examples:\n  gangctl job 12\n  gangctl job 12.1\n  gangctl job 17_3\n  gangctl job last"
    )]
    Job {
        /// The job: its id, ALLOCATION.STEP (12.1), ARRAY_TASK (17_3) or `last` (your
        /// newest job that is not a step).
        #[arg(value_name = "ID", value_parser = one_job)]
        #[arg(add = job_ids(Offer::Any))]
        id: String,
    },

    /// Cancel jobs (their ranks get SIGTERM, then SIGKILL after a grace), as scancel: by
    /// ids and ranges, and/or every active job of --user or in --state (all must match).
    ///
    /// Prints `cancelled N` for a job that ended at once (it was queued), `cancelling N:
    /// its ranks are being stopped` for a placed one. A job named by its id that has
    /// already ended is refused (`job N already completed`); the other jobs are still
    /// cancelled, and the exit status is then 1. A range skips ids that do not exist or
    /// have ended; so does a range of array tasks (17_[10-20] cancels those of its tasks
    /// that are active, and no other).
    #[command(
        after_help = "Examples:\n  gangctl cancel 12\n  gangctl cancel 71-75,80\n  gangctl cancel 12.1\n  gangctl cancel '17_[10-20]'\n  gangctl cancel --user alice --state queued\n  gangctl cancel --state PD 100-200"
    )]
    Cancel {
        /// Jobs, comma-separated: ids and ranges (3,5-9), steps (12.1), array tasks (17_3,
        /// 17_[1,3,5-7]).
        #[arg(value_name = "IDS|RANGES", value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Active))]
        ids: Vec<String>,
        /// Only jobs of this user (a name or a uid).
        #[arg(short, long, value_name = "USER")]
        user: Option<String>,
        /// Only jobs in these states, comma-separated: queued (PD), starting (CF), running
        /// (R).
        #[arg(short, long, value_name = "S,...", value_parser = job_filter::parse_state_set)]
        #[arg(add = tab::states())]
        state: Option<job_filter::States>,
    },

    /// Hold queued jobs, as scontrol hold: they stay queued but do not start until
    /// released. Held by an admin, only an admin releases them.
    #[command(
        after_help = "Examples:\n  gangctl hold 12\n  gangctl hold 20-29\n  gangctl hold '17_[10-20]'"
    )]
    Hold {
        /// Jobs, comma-separated: ids and ranges (3,5-9), array tasks (17_3, 17_[1-4]), or
        /// `last`; ranges pick among queued jobs.
        #[arg(value_name = "IDS|RANGES", required = true, value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Queued))]
        ids: Vec<String>,
    },

    /// Release held jobs, as scontrol release: they are queued for nodes again.
    #[command(after_help = "Examples:\n  gangctl release 12\n  gangctl release '17_[10-20]'")]
    Release {
        /// Jobs, comma-separated: ids and ranges (3,5-9), array tasks (17_3, 17_[1-4]), or
        /// `last`; ranges pick among queued jobs.
        #[arg(value_name = "IDS|RANGES", required = true, value_parser = job_refs)]
        #[arg(add = job_ids(Offer::Queued))]
        ids: Vec<String>,
    },

    /// Change a queued or running job, as scontrol update: its time limit (a user may
    /// lower it or give one to a job without; raising it is for admins) or its name.
    #[command(
        after_help = "Examples:\n  gangctl update 12 --time-limit 30m\n  gangctl update 12 --name solver-big"
    )]
    Update {
        /// The job: its id, ARRAY_TASK (17_3) or `last`.
        #[arg(value_name = "ID", value_parser = one_job)]
        id: String,
        #[arg(add = job_ids(Offer::Active))]
        /// The new time limit (Slurm's formats, or 90s, 5m, 2h; 0: none).
        #[arg(short = 't', long, alias = "time", value_name = "DURATION", value_parser = parse_duration)]
        time_limit: Option<u64>,
        /// The new name.
        #[arg(short = 'J', long, alias = "job-name")]
        name: Option<String>,
    },

    /// List the nodes of the mesh: state, agent address, jobs, clock offset from the
    /// master ± its error bound ("host": the agent trusts its host clock), and the newest
    /// slice table version the agent acknowledged.
    Nodes,

    /// Show the slice matrix: which job holds which node in each slice, the slice table in
    /// force (version, quantum, row order), the slice running now, and the queue.
    ///
    /// Each slice is drawn as a grid, row y=H-1 at the top and x=0 at the left; a cell is
    /// the id of the job on that node ("." if free); "*" marks a multiple-task slot (a job
    /// running in a slice besides its home slice). The slice running now is marked
    /// "▶ running".
    Slices {
        /// Redraw until Ctrl-C: the matrix is fetched every interval, and in between the
        /// running slice is moved on at each slot boundary (computed from the table's
        /// epoch and quantum; at most every 100 ms). With --output json: one JSON line per
        /// fetch.
        #[arg(short, long)]
        watch: bool,
        /// How often --watch fetches the matrix, in milliseconds.
        #[arg(long, default_value_t = 500, value_name = "N", value_parser = clap::value_parser!(u64).range(10..))]
        interval_ms: u64,
    },

    /// Gang switching figures over a recent window: co-scheduling skew, switch latency and
    /// switch cost (count, p50, p99, max, mean), switches reported and dropped, and the
    /// slice table version and quantum.
    ///
    /// skew: per slot boundary, the spread of the agents' last-signal times (corrected by
    /// their clock offsets). switch latency: per agent and switch, last signal sent minus
    /// the deadline. switch cost: per agent and switch, last signal minus first signal.
    /// JSON: {"skew":{"count","p50_ns","p99_ns","max_ns","mean_ns"},"switch_latency":{..},
    /// "switch_cost":{..},"switches_reported","switches_dropped","table_version","quantum_ns"}
    /// (integers, nanoseconds).
    Stats,

    /// Drain nodes: they take no new jobs; running ones finish. One request per node,
    /// each reported (`node X,Y: drained`); a node refused is an error, the others go on.
    #[command(after_help = "Examples:\n  gangctl drain 1,0\n  gangctl drain 0-3,1 '(3,3)'")]
    Drain {
        /// Nodes, as X,Y (e.g. 2,3) or (X,Y), or ranges on either axis: 0-3,1 (x from 0
        /// to 3 at y=1), 0-1,0-1.
        #[arg(value_name = "X,Y", required = true, value_parser = parse_node_set)]
        nodes: Vec<Vec<(u32, u32)>>,
    },

    /// Resume drained nodes: they take new jobs again (nodes as for drain).
    Resume {
        /// Nodes, as X,Y (e.g. 2,3) or (X,Y), or ranges on either axis: 0-3,1 (x from 0
        /// to 3 at y=1), 0-1,0-1.
        #[arg(value_name = "X,Y", required = true, value_parser = parse_node_set)]
        nodes: Vec<Vec<(u32, u32)>>,
    },

    /// The cluster's certificates: mutual TLS between the master and its agents (each
    /// node's certificate names its coordinate), and user certificates for remote clients.
    #[command(subcommand)]
    Certs(CertsCmd),

    /// Get a token to reach the master from elsewhere (over TLS). Run it on a cluster host:
    /// the master's Unix socket tells it who you are. Prints the token, or with --save
    /// keeps it in ~/.config/gang/token (mode 0600), where prun and gangctl find it, and
    /// prints its id.
    ///
    /// A token names you only: the master looks you up at every use (your groups then; a
    /// deleted account's tokens are refused). `gangctl token revoke` ends tokens early.
    #[command(args_conflicts_with_subcommands = true)]
    Token {
        /// How long it is valid: 90s, 30m, 12h, 1d (default: the master's, 1h; at most
        /// its limit, 24h).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        ttl: Option<u64>,
        #[arg(long)]
        save: bool,
        #[command(subcommand)]
        revoke: Option<TokenCmd>,
    },

    /// Follow a job's output until it ends, as prun shows it.
    ///
    /// Everything written so far, then live; exits with the job's exit code and names a
    /// failed rank, as prun. Stdin goes to rank 0 if the job reads it (prun ran it
    /// attached; a job submitted with --detach reads /dev/null). Ctrl-C, SIGTERM or
    /// SIGHUP detach (exit 128+signal); the job runs on.
    #[command(
        after_help = "Examples:\n  prun -n 2x2 --detach -- ./solver   # prints 12\n  gangctl attach 12\n  gangctl attach --label 12\n  gangctl attach 12.0   # step 0 of allocation 12, as sattach"
    )]
    Attach {
        /// The job: its id, ALLOCATION.STEP (12.0), ARRAY_TASK (17_3) or `last`.
        #[arg(value_name = "ID", value_parser = one_job)]
        id: String,
        #[arg(add = job_ids(Offer::Active))]
        /// Prefix every output line with the rank that wrote it ("3: hello").
        #[arg(short, long)]
        label: bool,
        /// Say when the job starts and when reattached after a master restart.
        #[arg(short, long)]
        verbose: bool,
        /// Do not print the line that names the failing rank.
        #[arg(short, long, conflicts_with = "verbose")]
        quiet: bool,
    },

    /// Print what a job wrote so far (running or finished) and exit.
    ///
    /// Its stdout to stdout, its stderr to stderr; with --stream, that stream only, on
    /// stdout. Streams written to files (prun --output/--error) are in those files, not
    /// here.
    #[command(
        after_help = "Examples:\n  gangctl output 12\n  gangctl output 12 --rank 3 --stream stderr\n  gangctl output 12.1\n  gangctl output 12 --label | grep error"
    )]
    Output {
        /// The job: its id, ALLOCATION.STEP (12.1), ARRAY_TASK (17_3) or `last`.
        #[arg(value_name = "ID", value_parser = one_job)]
        id: String,
        #[arg(add = job_ids(Offer::Any))]
        /// Only this rank's output (0 to the job's size - 1).
        #[arg(short, long, value_name = "N")]
        rank: Option<u32>,
        /// Only this stream, printed on stdout.
        #[arg(short, long, value_name = "STREAM", value_parser = ["stdout", "stderr"])]
        stream: Option<String>,
        /// Prefix every line with the rank that wrote it ("3: hello").
        #[arg(short, long)]
        label: bool,
    },

    /// Print a shell completion script for gangctl or prun on stdout (`gangctl install`
    /// installs them). The script asks gangctl at each Tab: options, values, job states,
    /// acct's columns and the ids of your jobs on the cluster.
    #[command(
        after_help = "Examples:\n  gangctl completions bash > /etc/bash_completion.d/gangctl\n  gangctl completions bash prun > /etc/bash_completion.d/prun\n  gangctl completions zsh > \"${fpath[1]}/_gangctl\"\n  gangctl completions fish prun > ~/.config/fish/completions/prun.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
        /// Whose completions.
        #[arg(value_enum, default_value = "gangctl", value_name = "COMMAND")]
        command: Program,
    },

    /// Write the man pages of prun and gangctl (one per subcommand: gangctl-jobs.1, ...)
    /// into DIR (`gangctl install` installs them where man finds them).
    #[command(
        after_help = "Examples:\n  gangctl man /usr/local/share/man/man1\n  gangctl man /tmp/m && man -l /tmp/m/prun.1"
    )]
    Man {
        /// Where to write them (made if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },

    /// Install prun and gangctl (and gang-master and gang-agent if built), their man pages
    /// and shell completions, where the system finds them.
    ///
    /// Copies the binaries beside this gangctl into PREFIX/bin, writes the man pages into
    /// PREFIX/share/man/man1 (man finds them once PREFIX/bin is in PATH) and the bash, zsh
    /// and fish completions into PREFIX/share/bash-completion/completions,
    /// PREFIX/share/zsh/site-functions and PREFIX/share/fish/vendor_completions.d. Prints
    /// each file, and how to put PREFIX/bin in PATH if it is not. A file already as it
    /// would be written is left alone: running it again changes nothing.
    #[command(
        after_help = "Examples:\n  target/release/gangctl install    # after cargo build --release --workspace\n  gangctl install --prefix /opt/gang\n  gangctl install --dry-run"
    )]
    Install(crate::gangctl::shell_docs::install::InstallArgs),
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Revoke tokens, at once and across restarts of the master: a token you hold (`-`:
    /// read it from stdin), one by its id (admins; the master logs each token's id, user
    /// and expiry when it issues it), or every token of a user issued until now (that
    /// user, or an admin). Works on the socket and over TLS.
    #[command(
        group(clap::ArgGroup::new("what").required(true).args(["token", "id", "user"])),
        after_help = "Examples:\n  gangctl token revoke - < ~/.config/gang/token\n  gangctl token revoke --user alice\n  gangctl token revoke --id 3f0c9a1e5b7d4c2a8e6f1b3d5a7c9e0f"
    )]
    Revoke {
        /// The token (as `gangctl token` printed it), or `-` to read it from stdin.
        #[arg(value_name = "TOKEN")]
        token: Option<String>,
        /// The id of the token to revoke (32 hex digits).
        #[arg(long)]
        id: Option<String>,
        /// Revoke every token of this user issued until now.
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CertsCmd {
    /// Make a cluster CA in DIR and certificates for the master and every node.
    #[command(
        after_help = "Then, on each host: the master gets DIR/ca.pem, master.pem, \
        master-key.pem; node X,Y's agent gets DIR/ca.pem and nodes/node-X-Y{,-key}.pem.\n\
        Keep DIR/ca-key.pem offline. See deploy/README.md."
    )]
    Init {
        dir: PathBuf,
        /// The mesh, WxH: one node certificate per node.
        #[arg(long, value_parser = parse_mesh, value_name = "WxH")]
        mesh: (u32, u32),
        /// Validity of the master's and nodes' certificates, in days.
        #[arg(long, default_value_t = gang_auth::pki::DEFAULT_DAYS)]
        days: i64,
    },
    /// Sign a certificate for a user (a remote client) with the CA in --dir.
    User {
        /// The Unix user name the master will know them by.
        name: String,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 365)]
        days: i64,
    },
    /// Sign a (new) certificate for a node with the CA in --dir.
    Node {
        #[arg(value_name = "X,Y", value_parser = parse_node)]
        node: (u32, u32),
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = gang_auth::pki::DEFAULT_DAYS)]
        days: i64,
    },
}

/// A job list as typed (`3,5-9`, `12.1`, `17_[1-4]`, `last`), checked as clap reads it.
fn job_refs(s: &str) -> Result<String, String> {
    crate::jobs::job_ref::parse_named(&[s.to_string()]).map(|_| s.to_string())
}

/// One job (`12`, `12.1`, `17_3`, `last`), checked as clap reads it.
fn one_job(s: &str) -> Result<String, String> {
    match crate::jobs::job_ref::parse_named(&[s.to_string()])? {
        Some(n) if crate::jobs::resolve::names_one(&n) => Ok(s.to_string()),
        _ => Err("name one job: ID, ID.STEP, ID_TASK or `last`".into()),
    }
}

/// `--since`, against the clock when the command line is read.
pub fn since_now(s: &str) -> Result<i64, String> {
    job_filter::parse_since(s, now_ns())
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A command whose completions or pages are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Program {
    Gangctl,
    Prun,
}
