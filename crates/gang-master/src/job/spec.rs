//! A job's spec: what was asked at submission and what it was resolved to (modes, the
//! batch script, holds, array tasks), and the checks of a name.

use super::*;

/// How far a job's modes are decided: as the submitter asked ([`Asked`]: `None` takes the
/// cluster's default), or fixed for the rest of its life ([`Resolved`]). One definition of
/// a spec serves the submission and the job, so a new field is written once.
pub trait Stage {
    type Mode<T: ModeValue>: ModeValue;
}

/// What a mode's value must be to be carried, compared and saved.
pub trait ModeValue:
    std::fmt::Debug + Clone + PartialEq + Eq + Default + Serialize + serde::de::DeserializeOwned
{
}
impl<T> ModeValue for T where
    T: std::fmt::Debug + Clone + PartialEq + Eq + Default + Serialize + serde::de::DeserializeOwned
{
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {}
impl Stage for Asked {
    type Mode<T: ModeValue> = Option<T>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {}
impl Stage for Resolved {
    type Mode<T: ModeValue> = T;
}

/// What a job is: who runs what, and how. Fixed once submitted (a job shares it, behind an
/// `Arc`, with its views and launch orders). Saved flat in the job's row, as it always was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct Spec<S: Stage = Resolved> {
    #[serde(flatten)]
    pub owner: Owner,
    /// Display name; empty when asked: argv[0].
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    /// 0: no limit.
    pub time_limit_s: u64,
    pub stdin: bool,
    /// As requested: "4x2" or a node count.
    pub shape: String,
    #[serde(default)]
    pub gang: S::Mode<GangMode>,
    /// What happens when it deadlocks.
    #[serde(default)]
    pub on_deadlock: S::Mode<DeadlockPolicy>,
    /// How its messaging library keeps its context across switches (asked `None`: resident).
    #[serde(default)]
    pub msg_context: S::Mode<MsgContext>,
    /// What the agents serve for MPI.
    #[serde(default)]
    pub mpi: S::Mode<Mpi>,
    /// Whether the MPI checking library is preloaded into its ranks.
    #[serde(default)]
    pub mpi_check: bool,
    /// `prun --output/--error` patterns (empty: output relayed through the master).
    #[serde(default, skip_serializing_if = "OutputFiles::is_empty")]
    pub output_files: OutputFiles,
    /// The submitter's idempotency token (`SubmitRequest.client_token`): a retry with the
    /// same token (and owner) finds the first job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// Jobs it waits for (`--dependency afterok:12`): all must hold before it is queued
    /// for nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependency: Vec<Dep>,
    /// An allocation (`gangctl alloc`, `gangctl submit`): its nodes hold steps; `argv`, if
    /// any, is its batch script, run as its one rank on its first node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allocate: bool,
    /// A step: the allocation it runs in (placed on its nodes, switched with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<JobId>,
    /// A batch script, carried apart from argv (where any user of a node would read it):
    /// its text, and where in argv the agent puts the path of the file it writes it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<BatchScript>,
    /// Which of its ranks run on a pseudo-terminal (`prun -u`, `--pty`).
    #[serde(default, skip_serializing_if = "Pty::is_none")]
    pub pty: Pty,
    /// How it was asked to be submitted (held, as an array): read by the submission only,
    /// never saved; what it makes of it is in the job's record (`hold`, `array`).
    #[serde(skip)]
    pub at_submit: AtSubmit,
}

/// Which of a job's ranks run on a pseudo-terminal (`JobSpec.pty`): the agents open it;
/// the master only carries the choice to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pty {
    /// Pipes.
    #[default]
    None,
    /// Rank 0 (`prun --pty`, `-u`).
    Rank0,
    /// Every rank (`prun -u --label`).
    All,
}

impl Pty {
    pub fn is_none(&self) -> bool {
        *self == Pty::None
    }

    /// `JobSpec.pty`, refused if unknown (a newer client's value this master cannot run)
    /// or with output files: a pseudo-terminal's output is relayed, not written to files.
    pub fn asked(v: i32, output: &str, error: &str) -> Result<Pty, String> {
        let pty = match gang_proto::v1::Pty::try_from(v) {
            Ok(gang_proto::v1::Pty::None) => return Ok(Pty::None),
            Ok(gang_proto::v1::Pty::Rank0) => Pty::Rank0,
            Ok(gang_proto::v1::Pty::All) => Pty::All,
            Err(_) => return Err(format!("unknown pty {v}: expected none, rank 0 or all")),
        };
        if !output.is_empty() || !error.is_empty() {
            return Err(
                "spec.pty: a pseudo-terminal's output is relayed (prun -u, --pty); \
                        spec.output and spec.error write files instead: choose one"
                    .into(),
            );
        }
        Ok(pty)
    }
}

impl From<Pty> for gang_proto::v1::Pty {
    fn from(p: Pty) -> Self {
        match p {
            Pty::None => gang_proto::v1::Pty::None,
            Pty::Rank0 => gang_proto::v1::Pty::Rank0,
            Pty::All => gang_proto::v1::Pty::All,
        }
    }
}

/// A batch script: its text and where its path goes in argv (`JobSpec.script_at`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchScript {
    pub text: String,
    pub at: u32,
}

/// Submission options that are not part of the job itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtSubmit {
    /// Submit it held (`--hold`): it waits for `gangctl release`.
    pub hold: bool,
    /// Submit one job per task of this array.
    pub array: Option<ArraySpec>,
}

/// Who holds a queued job back (`gangctl hold`): it is not queued for nodes until
/// released. A hold an admin set only an admin releases (Slurm's admin hold).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub by: String,
    pub admin: bool,
}

/// A job's place in a job array: the array's id (its first task's job id), its index, and
/// how many of the array's tasks may be queued for nodes or run at once (0: all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    pub job: JobId,
    pub task: u32,
    #[serde(default)]
    pub throttle: u32,
    /// The array's task count and lowest and highest index, which its ranks are told
    /// (`GANG_ARRAY_TASK_COUNT`...). 0: a task saved before the tasks shared one spec,
    /// whose spec already says so.
    #[serde(default)]
    pub count: u32,
    #[serde(default)]
    pub min: u32,
    #[serde(default)]
    pub max: u32,
}

impl ArrayTask {
    /// The spec a task's ranks get: its array's, with its index in the environment and
    /// in the output patterns (`%A`, `%a`). The array's tasks share one spec (a thousand
    /// tasks of a large command and environment are one copy, in memory and saved).
    pub fn task_spec(self, array: &Spec) -> Spec {
        let mut s = array.clone();
        if self.count == 0 {
            return s;
        }
        let env = [
            ("GANG_ARRAY_JOB_ID", self.job.0.to_string()),
            ("GANG_ARRAY_TASK_ID", self.task.to_string()),
            ("GANG_ARRAY_TASK_COUNT", self.count.to_string()),
            ("GANG_ARRAY_TASK_MIN", self.min.to_string()),
            ("GANG_ARRAY_TASK_MAX", self.max.to_string()),
        ];
        for (k, v) in env {
            s.env.insert(k.to_string(), v);
        }
        s.output_files = self.output_files(&array.output_files);
        s
    }

    /// The array's output patterns with this task's `%A` and `%a`.
    pub fn output_files(self, array: &OutputFiles) -> OutputFiles {
        use gang_core::job::output_pattern::expand_array;
        if self.count == 0 {
            return array.clone();
        }
        OutputFiles {
            output: expand_array(&array.output, self.job.0, self.task),
            error: expand_array(&array.error, self.job.0, self.task),
        }
    }
}

/// The cluster's defaults for the modes a submission may leave out.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub gang: GangMode,
    pub on_deadlock: DeadlockPolicy,
    pub mpi: Mpi,
}

/// The longest job name, in bytes (Slurm allows more, but a name is a label, not data).
pub const MAX_NAME_BYTES: usize = 256;

/// A job name users chose: 1 to `MAX_NAME_BYTES` bytes, no control character (names are
/// printed on other users' and admins' terminals: an ESC there is an attack).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "a job name must be 1 to {MAX_NAME_BYTES} bytes, got {} bytes",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!(
            "a job name may not contain control characters, got {c:?} in {:?}",
            name.escape_debug().to_string()
        ));
    }
    Ok(())
}

/// The name of a job that chose none: its program, cut to `MAX_NAME_BYTES` and with
/// control characters shown as '?'.
pub fn default_name(argv0: &str) -> String {
    let mut name: String = argv0
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if name.len() > MAX_NAME_BYTES {
        let mut end = MAX_NAME_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

impl Spec<Asked> {
    /// The spec the job keeps: the defaults of today for what it left out (a later change
    /// of the cluster's defaults does not change a job), and a name.
    pub fn resolve(self, d: Defaults) -> Spec {
        Spec {
            name: if self.name.is_empty() {
                default_name(self.argv.first().map_or("", String::as_str))
            } else {
                self.name
            },
            gang: self.gang.unwrap_or(d.gang),
            on_deadlock: self.on_deadlock.unwrap_or(d.on_deadlock),
            msg_context: self.msg_context.unwrap_or_default(),
            mpi: self.mpi.unwrap_or(d.mpi),
            owner: self.owner,
            argv: self.argv,
            cwd: self.cwd,
            env: self.env,
            time_limit_s: self.time_limit_s,
            stdin: self.stdin,
            shape: self.shape,
            mpi_check: self.mpi_check,
            output_files: self.output_files,
            client_token: self.client_token,
            dependency: self.dependency,
            allocate: self.allocate,
            allocation: self.allocation,
            script: self.script,
            pty: self.pty,
            at_submit: AtSubmit::default(),
        }
    }
}
