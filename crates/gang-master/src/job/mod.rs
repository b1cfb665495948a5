//! A job as the master tracks it: its spec (fixed at submission), its record (the spec and
//! where it is in its life: what is saved and shown), and the live state of its ranks.

use std::collections::BTreeMap;
use std::sync::Arc;

use gang_core::schedule::array::ArraySpec;
use gang_core::schedule::dependency::Dep;
use gang_core::{DeadlockPolicy, GangMode, JobId, MsgContext, Submesh};
use serde::{Deserialize, Serialize};

use crate::msg_jobs::JobMessaging;

mod ranks;
pub mod read_back;
mod spec;
pub mod transition;
pub use ranks::{Rank, Ranks};
pub use spec::*;

/// What the agents serve a job's ranks for MPI libraries to find their peers.
///
/// `Default` is `Pmi1`, not the cluster's default (`Mpi::CLUSTER_DEFAULT`): it is what a
/// job saved before jobs had a choice is read back with, and such a job ran with PMI-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mpi {
    /// The simple wire protocol (PMI-1, and PMI-2 for a client that asks for it): MPICH.
    #[default]
    Pmi1,
    /// Nothing.
    None,
    /// The simple wire protocol, named PMI-2.
    Pmi2,
    /// A PMIx server in the agent (Open MPI), besides the simple protocol.
    Pmix,
    /// The simple protocol, and the agent's PMIx server for a program that may need it:
    /// each agent decides from the rank's program (MPICH and Open MPI alike).
    Auto,
}

impl Mpi {
    /// The cluster's default when its admin chose none: MPI programs start right without
    /// a flag, whichever MPI built them.
    pub const CLUSTER_DEFAULT: Mpi = Mpi::Auto;
}

impl From<Mpi> for gang_proto::v1::Mpi {
    fn from(m: Mpi) -> Self {
        match m {
            Mpi::Pmi1 => gang_proto::v1::Mpi::Pmi1,
            Mpi::None => gang_proto::v1::Mpi::None,
            Mpi::Pmi2 => gang_proto::v1::Mpi::Pmi2,
            Mpi::Pmix => gang_proto::v1::Mpi::Pmix,
            Mpi::Auto => gang_proto::v1::Mpi::Auto,
        }
    }
}

impl std::str::FromStr for Mpi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mpi::Auto),
            "pmi1" => Ok(Mpi::Pmi1),
            "pmi2" => Ok(Mpi::Pmi2),
            "pmix" => Ok(Mpi::Pmix),
            "none" => Ok(Mpi::None),
            _ => Err(format!(
                "unknown MPI interface `{s}`: expected auto, pmi1, pmi2, pmix or none"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Queued,
    Starting,
    Running,
    Completed,
    Failed,
    Cancelled,
    /// Cancelled by its time limit (Slurm's TIMEOUT), told apart from a user's cancel.
    Timeout,
}

impl State {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Completed | State::Failed | State::Cancelled | State::Timeout
        )
    }

    /// Placed on the mesh (its ranks are being launched, or run).
    pub fn is_placed(self) -> bool {
        matches!(self, State::Starting | State::Running)
    }

    /// The state as errors and pending reasons say it.
    pub fn word(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Starting => "starting",
            State::Running => "running",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Timeout => "timed out",
        }
    }
}

/// Where a job's ranks write their stdout and stderr, as file name patterns (see
/// `gang_core::job::output_pattern`): the agents expand and open them, so the master only
/// checks and carries them. Empty: the stream is piped to the master and relayed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFiles {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl OutputFiles {
    pub fn is_empty(&self) -> bool {
        self.output.is_empty() && self.error.is_empty()
    }
}

/// A Unix identity: who asks (a caller's), and whose a job is. Taken from the caller's
/// identity, never from a request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary one included): ranks run with them.
    #[serde(default)]
    pub groups: Vec<u32>,
    pub user: String,
}

/// One job, the description every other form of it is made from: its spec, and where it
/// is in its life. The database row ([`SavedJob`]), the clients' view
/// (`state::views::JobView`) and the launch orders (`state::effects::LaunchOrder`) carry
/// or share it rather than restate it, and read as it (`Deref`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    #[serde(flatten, with = "shared")]
    pub spec: Arc<Spec>,
    /// The shape allocated.
    pub w: u32,
    pub h: u32,
    /// Changed only by `move_to` (`transition.rs`).
    state: State,
    pub submesh: Option<Submesh>,
    pub exit_code: Option<i32>,
    pub reason: String,
    pub submit_ns: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Time scheduled to run so far (its slices' slots), the measure of its time limit.
    #[serde(default)]
    pub run_ns: i64,
    /// Output its ranks wrote that never reached the output log, per rank and stream.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_lost: Vec<OutputLoss>,
    /// Held back from the queue while queued (`gangctl hold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    /// Its place in a job array, if it is a task of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayTask>,
    /// What its ranks used, from their exit reports.
    #[serde(default, skip_serializing_if = "JobUsage::is_empty")]
    pub usage: JobUsage,
    /// A step's number in its allocation (0, 1, ...: Slurm's JOBID.STEP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

impl JobRecord {
    /// A job just accepted: queued, of `w x h` nodes, nothing run yet.
    pub fn queued(id: JobId, spec: Arc<Spec>, w: u32, h: u32, submit_ns: i64) -> JobRecord {
        JobRecord {
            id,
            spec,
            w,
            h,
            state: State::Queued,
            submesh: None,
            exit_code: None,
            reason: String::new(),
            submit_ns,
            start_ns: 0,
            end_ns: 0,
            run_ns: 0,
            output_lost: Vec::new(),
            hold: None,
            array: None,
            usage: JobUsage::default(),
            step: None,
        }
    }
}

/// What one rank used, as its agent measured it in its cgroups; `None`: not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankUsage {
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub mem_peak_bytes: Option<u64>,
}

/// What a job's ranks used, all told (sacct's UserCPU, SystemCPU, MaxRSS): CPU summed over
/// the ranks measured, the largest memory high-water mark and its rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    /// Ranks whose usage was measured (the others' nodes had no cgroups for it).
    pub ranks_measured: u32,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub max_rss_bytes: u64,
    pub max_rss_rank: u32,
}

impl JobUsage {
    pub fn add(&mut self, rank: u32, u: RankUsage) {
        if u.cpu_user_ns.is_none() && u.cpu_system_ns.is_none() && u.mem_peak_bytes.is_none() {
            return;
        }
        self.ranks_measured += 1;
        self.cpu_user_ns = self.cpu_user_ns.saturating_add(u.cpu_user_ns.unwrap_or(0));
        self.cpu_system_ns = self
            .cpu_system_ns
            .saturating_add(u.cpu_system_ns.unwrap_or(0));
        if let Some(m) = u.mem_peak_bytes
            && m > self.max_rss_bytes
        {
            self.max_rss_bytes = m;
            self.max_rss_rank = rank;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranks_measured == 0
    }
}

/// A piped stream of a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutStream {
    Stdout,
    Stderr,
}

/// Bytes of one rank's stream that nobody can read: the agent's spool for the job was
/// full while the master was away, or the log reached its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputLoss {
    pub rank: u32,
    pub stream: OutStream,
    pub bytes: u64,
}

/// A spec saved within its job's row, and shared once loaded. (Serde's `rc` feature would
/// do this, but a feature is switched on for every crate of the build, for one field.)
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Spec;

    pub fn serialize<S: Serializer>(spec: &Arc<Spec>, s: S) -> Result<S::Ok, S::Error> {
        spec.as_ref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Spec>, D::Error> {
        Spec::deserialize(d).map(Arc::new)
    }
}

impl std::ops::Deref for JobRecord {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        &self.spec
    }
}

/// A job's row in the database (one JSON object): its record and, while it is placed,
/// what a restarted master needs to carry on exactly where it was.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedJob {
    #[serde(flatten)]
    pub record: JobRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Live>,
    /// A task of an array whose spec is saved once for all its tasks (`Save::Spec`): the
    /// row holds a placeholder spec, and the array's is put in when it is read back
    /// (`attach_spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_of: Option<JobId>,
}

/// The spec a task's row holds in place of its array's (a few hundred bytes).
pub fn placeholder_spec() -> Arc<Spec> {
    static P: std::sync::OnceLock<Arc<Spec>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        Arc::new(Spec {
            owner: Owner {
                uid: u32::MAX,
                gid: u32::MAX,
                groups: Vec::new(),
                user: String::new(),
            },
            name: String::new(),
            argv: Vec::new(),
            cwd: String::new(),
            env: BTreeMap::new(),
            time_limit_s: 0,
            stdin: false,
            shape: String::new(),
            gang: GangMode::default(),
            on_deadlock: DeadlockPolicy::default(),
            msg_context: MsgContext::default(),
            mpi: Mpi::default(),
            mpi_check: false,
            output_files: OutputFiles::default(),
            client_token: None,
            dependency: Vec::new(),
            allocate: false,
            allocation: None,
            pty: Pty::None,
            script: None,
            at_submit: AtSubmit::default(),
        })
    })
    .clone()
}

impl std::ops::Deref for SavedJob {
    type Target = JobRecord;
    fn deref(&self) -> &JobRecord {
        &self.record
    }
}

/// The live part of a placed job, saved with it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Live {
    /// Per rank: its exit code once it ended (`None` while it may run).
    pub exits: Vec<Option<i32>>,
    pub failure: Option<(Option<i32>, String)>,
    pub cancelled: Option<String>,
    /// The cancel came from its time limit: it ends as `Timeout`.
    #[serde(default)]
    pub timed_out: bool,
    /// The home slice, so that adoption after a restart rebuilds a matrix that fits.
    pub home_slice: Option<u32>,
    /// An allocation without a batch script was ended (`EndAllocation`) with this code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_with: Option<i32>,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub record: JobRecord,
    pub ranks: Ranks,
    /// Set once something went wrong: the first failing rank's code (if it ran), and why.
    pub failure: Option<(Option<i32>, String)>,
    /// Set when a user or the time limit cancelled it.
    pub cancelled: Option<String>,
    /// The cancel came from its time limit (the job ends as `Timeout`).
    pub timed_out: bool,
    /// An allocation without a batch script was ended by its owner with this exit code.
    pub ended_with: Option<i32>,
    /// Master-clock instant up to which `record.run_ns` is accounted.
    pub run_accounted_to: i64,
    /// Its messaging library's activity, verdict and fences, once it runs (not saved).
    /// Shared with the round's undo journal until changed, as the ranks are: it holds
    /// three entries a rank.
    pub messaging: Option<Arc<JobMessaging>>,
    /// A task whose spec is its array's, shared and saved once (`SavedJob::spec_of`).
    pub spec_shared: bool,
    /// Counted in its owner's queued jobs and bytes (`state::queued`): while it is queued.
    pub charged: bool,
}

impl Job {
    pub fn new(record: JobRecord) -> Self {
        Job {
            record,
            ranks: Ranks::default(),
            failure: None,
            cancelled: None,
            timed_out: false,
            ended_with: None,
            run_accounted_to: 0,
            messaging: None,
            spec_shared: false,
            charged: false,
        }
    }

    /// The job's messaging state, made on first use.
    pub fn messaging_mut(&mut self) -> &mut JobMessaging {
        let size = self.record.w * self.record.h;
        Arc::make_mut(
            self.messaging
                .get_or_insert_with(|| Arc::new(JobMessaging::new(size))),
        )
    }

    /// The row to save: with its live part while it is placed.
    pub fn persisted(&self, home_slice: Option<u32>) -> SavedJob {
        let state = self.record.state;
        let live = (!state.is_final() && state != State::Queued).then(|| Live {
            exits: self
                .ranks
                .iter()
                .map(|r| match r {
                    Rank::Exited(c) => Some(*c),
                    Rank::Gone => Some(128 + 9),
                    _ => None,
                })
                .collect(),
            failure: self.failure.clone(),
            cancelled: self.cancelled.clone(),
            timed_out: self.timed_out,
            home_slice,
            ended_with: self.ended_with,
        });
        let (record, spec_of) = match self.record.array {
            Some(a) if self.spec_shared => (
                JobRecord {
                    spec: placeholder_spec(),
                    ..self.record.clone()
                },
                Some(a.job),
            ),
            _ => (self.record.clone(), None),
        };
        SavedJob {
            record,
            live,
            spec_of,
        }
    }

    /// A job reloaded from the database: ranks that had ended stay ended, the others are
    /// pending until their agents report them again.
    pub fn restored(saved: SavedJob) -> Self {
        let live = saved.live.unwrap_or_default();
        let mut job = Job::new(saved.record);
        job.spec_shared = saved.spec_of.is_some();
        if matches!(job.record.state, State::Starting | State::Running) {
            job.ranks = (0..job.rank_count() as usize)
                .map(|i| match live.exits.get(i).copied().flatten() {
                    Some(c) => Rank::Exited(c),
                    None => Rank::Pending,
                })
                .collect::<Vec<_>>()
                .into();
            job.failure = live.failure;
            job.cancelled = live.cancelled;
            job.timed_out = live.timed_out;
            job.ended_with = live.ended_with;
        }
        job
    }

    pub fn id(&self) -> JobId {
        self.record.id
    }

    pub fn size(&self) -> u32 {
        self.record.w * self.record.h
    }

    /// Ranks launched: every node's, but an allocation's (its batch script alone, or none).
    pub fn rank_count(&self) -> u32 {
        if self.record.allocate {
            u32::from(!self.record.argv.is_empty())
        } else {
            self.size()
        }
    }

    /// The job whose slots it runs in (the slice tables name): a step's allocation.
    pub fn slot_job(&self) -> JobId {
        self.record.allocation.unwrap_or(self.record.id)
    }

    /// An allocation whose own part is over: its batch script ended, its owner ended it, or
    /// it was cancelled or failed. Its steps are stopped then, and it ends after them.
    pub fn allocation_over(&self) -> bool {
        self.record.allocate
            && (self.cancelled.is_some()
                || self.failure.is_some()
                || self.ended_with.is_some()
                || (!self.ranks.is_empty() && self.ranks.iter().all(|r| r.is_done())))
    }

    /// The node of rank `r`: ranks are numbered row-major from the submesh's base.
    pub fn node_of(&self, r: u32) -> Option<(u32, u32)> {
        let sm = self.record.submesh?;
        Some((sm.x + r % sm.w, sm.y + r / sm.w))
    }

    /// The rank on node `(x, y)`, if the job runs there.
    pub fn rank_on(&self, x: u32, y: u32) -> Option<u32> {
        let sm = self.record.submesh?;
        (x >= sm.x && x < sm.x + sm.w && y >= sm.y && y < sm.y + sm.h)
            .then(|| (y - sm.y) * sm.w + (x - sm.x))
    }

    pub fn nodes(&self) -> Vec<(u32, u32)> {
        self.record
            .submesh
            .map(|sm| sm.nodes().collect())
            .unwrap_or_default()
    }

    pub fn all_ranks_done(&self) -> bool {
        !self.ranks.is_empty() && self.ranks.iter().all(|r| r.is_done())
    }

    /// Record the first failure only: later ones are consequences (ranks killed after it).
    pub fn fail(&mut self, code: Option<i32>, reason: String) {
        if self.failure.is_none() {
            self.failure = Some((code, reason));
        }
    }

    /// Record a failure; whether it starts the job's teardown (it is the first thing to
    /// go wrong, and nobody cancelled it): only then must its other ranks be stopped.
    pub fn start_teardown(&mut self, code: Option<i32>, reason: String) -> bool {
        let first = self.failure.is_none() && self.cancelled.is_none();
        self.fail(code, reason);
        first
    }
}

/// Shell convention: a process killed by signal N exits "128+N".
/// How a rank's death by `signal` reads in a job's reason: `killed by signal 11
/// (SIGSEGV)`, the name as `kill -l` spells it, so that users need not look it up.
pub fn killed_by(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => format!("was killed by signal {signal} ({})", s.as_str()),
        Err(_) => format!("was killed by signal {signal}"),
    }
}

pub fn signal_code(signal: i32) -> i32 {
    // Agents report real signal numbers; a bogus one must not overflow the master.
    128i32.saturating_add(signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_labels_without_control_characters() {
        assert!(check_name("solver-run 3").is_ok());
        assert!(check_name(&"é".repeat(128)).is_ok());
        assert!(check_name("").unwrap_err().contains("1 to 256 bytes"));
        let long = "x".repeat(2_500_000);
        assert!(check_name(&long).unwrap_err().contains("got 2500000 bytes"));
        for bad in ["a\u{1b}[2Jb", "nul\0", "two\nlines", "\u{9b}31m"] {
            assert!(
                check_name(bad).unwrap_err().contains("control characters"),
                "{bad:?}"
            );
        }
        // A program's name stands in, made printable and short.
        assert_eq!(default_name("./a.out"), "./a.out");
        assert_eq!(default_name("x\u{1b}y"), "x?y");
        let long = default_name(&"é".repeat(200));
        assert!(long.len() <= MAX_NAME_BYTES && check_name(&long).is_ok());
    }
}
