//! A PMI server for the rank: the "simple" wire protocols MPICH speaks to its process
//! manager (hydra's `mpiexec`, Slurm's `mpi/pmi1` and `mpi/pmi2`, Flux), so an unmodified
//! MPICH program run by `prun` finds its peers instead of starting as a singleton.
//!
//! The rank inherits one end of a socketpair, named by `PMI_FD`; the agent serves the
//! other end in a task. Every client starts with a PMI-1 line, `cmd=init pmi_version=N`;
//! its version picks the wire for the rest of the session:
//! - PMI-1 (`v1`): lines of space-separated `key=value` words, the first `cmd=NAME` (or
//!   `mcmd=spawn`, several lines ending with `endcmd`);
//! - PMI-2 (`v2`): frames of a 6-character decimal length and `key=value;` pairs, `;` in a
//!   value doubled.
//!
//! The key-value space is the job's: a put is kept in the rank's own table, and a barrier
//! (`barrier_in`, `kvs-fence`) is a fence through the master (`msg::space`), which answers
//! once every rank of the job arrived, with everything any rank put; gets then answer
//! from that space. Both wires share that state ([`Session`]).

pub(crate) mod progress_preload;
pub(crate) mod v1;
pub(crate) mod v2;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tracing::{debug, info, warn};

use crate::ranks::RankKey;

pub use v1::{Line, parse};

/// Who completes a barrier: the job's fence through the master (`msg::space` implements
/// it; this module stays below `msg` in the import graph).
pub trait Fencer: Send + Sync + 'static {
    fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: BTreeMap<String, String>,
    ) -> impl std::future::Future<Output = Result<Arc<BTreeMap<String, String>>, String>> + Send;
}

/// What the rank is told of the limits (what hydra says too).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Longest line or frame accepted: a put of the longest key and value, and room for the
/// words (a value of nothing but `;` is twice as long on the PMI-2 wire).
pub(crate) const LINE_MAX: usize = 64 + KVSNAME_MAX + KEYLEN_MAX + 2 * VALLEN_MAX;
/// Most a rank may keep in its server (keys and values of its puts and node attributes):
/// every put goes to the master at each barrier, and the server is the agent's memory.
/// Far above what an MPI library puts (an address or two per rank).
pub const PUTS_MAX_BYTES: usize = 1 << 20;

/// The job as the rank's PMI server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmiJob {
    pub key: RankKey,
    pub size: u32,
    /// The job's name (`RankRequest::namespace`): PMI-1's kvsname, PMI-2's jobid.
    pub namespace: String,
}

impl PmiJob {
    pub fn kvsname(&self) -> String {
        self.namespace.clone()
    }

    /// The environment MPICH's simple PMI client reads: the fd, its rank and the size.
    pub fn env(&self, fd: i32) -> Vec<(String, String)> {
        vec![
            ("PMI_FD".into(), fd.to_string()),
            ("PMI_RANK".into(), self.key.rank.to_string()),
            ("PMI_SIZE".into(), self.size.to_string()),
            ("PMI_JOBID".into(), self.kvsname()),
            ("PMI_APPNUM".into(), "0".into()),
        ]
    }

    /// `PMI_process_mapping`: one rank per node (every rank of a job has its own agent
    /// node), in MPICH's "vector" notation: starting at node 0, `size` nodes of 1 rank.
    fn process_mapping(&self) -> String {
        format!("(vector,(0,{},1))", self.size)
    }
}

/// A socketpair for one rank: (the agent's end, the rank's end). Both close on exec; the
/// child clears the flag on its own end (`inherit`) just before exec, so no other rank
/// started meanwhile inherits it.
pub fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into the array it is given.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the forked child: let `fd` survive exec. Async-signal-safe (one fcntl).
pub fn inherit(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; no memory is touched.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The agent's end as a tokio stream.
pub fn agent_stream(fd: OwnedFd) -> std::io::Result<UnixStream> {
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true)?;
    UnixStream::from_std(std)
}

/// A rank's PMI abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    pub code: i32,
    pub what: String,
}

impl Abort {
    fn new(code: i32, message: Option<&str>) -> Abort {
        let mut what = format!("called PMI abort (MPI_Abort) with exit code {code}");
        if let Some(m) = message.map(str::trim).filter(|m| !m.is_empty()) {
            what.push_str(": ");
            what.push_str(m);
        }
        Abort { code, what }
    }
}

/// What to do after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Reply(String),
    /// A barrier: fence, then answer.
    Barrier,
    /// `finalize`: answer, the rank closes.
    Finalize(String),
    /// `abort`: no answer; the agent ends the rank, reported as exiting with its code
    /// (what hydra does too).
    Abort,
}

/// The wire a session speaks, fixed by its `init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    V1,
    V2,
}

/// The server's state for one rank, whichever wire it speaks.
pub struct Session {
    job: PmiJob,
    wire: Wire,
    /// Everything this rank put (sent whole at each barrier).
    puts: BTreeMap<String, String>,
    /// The job's space as of the last completed barrier.
    space: Arc<BTreeMap<String, String>>,
    /// PMI-2 node attributes: every rank of a job has a node of its own, so they are
    /// the rank's own.
    node_attrs: BTreeMap<String, String>,
    /// Bytes of keys and values in `puts` and `node_attrs` (bounded by `PUTS_MAX_BYTES`).
    held: usize,
    epoch: u32,
    /// Set by `abort`: the exit code the rank asked for and what the job's failure
    /// reason says.
    pub aborted: Option<Abort>,
}

impl Session {
    pub fn new(job: PmiJob) -> Session {
        Session {
            job,
            wire: Wire::V1,
            puts: BTreeMap::new(),
            space: Arc::default(),
            node_attrs: BTreeMap::new(),
            held: 0,
            epoch: 0,
            aborted: None,
        }
    }

    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// A value put by this rank, or by any rank before the last barrier; or the job's
    /// process mapping.
    fn lookup(&self, key: &str) -> Option<String> {
        if key == "PMI_process_mapping" {
            return Some(self.job.process_mapping());
        }
        self.puts.get(key).or_else(|| self.space.get(key)).cloned()
    }

    /// Keep a put, within the limits the rank was told.
    fn put(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        keep(&mut self.puts, &mut self.held, key, value)
    }

    /// Keep a PMI-2 node attribute, within the same limits as a put.
    fn put_node_attr(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        keep(&mut self.node_attrs, &mut self.held, key, value)
    }

    /// Bytes this rank keeps in its server (at most `PUTS_MAX_BYTES`).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// The fence's next epoch and the puts to send.
    pub fn barrier_start(&mut self) -> (u32, &BTreeMap<String, String>) {
        self.epoch += 1;
        (self.epoch, &self.puts)
    }

    /// The fence's answer, and the reply to send on this session's wire.
    pub fn barrier_done(
        &mut self,
        result: Result<Arc<BTreeMap<String, String>>, String>,
    ) -> String {
        let result = result.map(|space| self.space = space);
        match self.wire {
            Wire::V1 => v1::barrier_reply(result),
            Wire::V2 => v2::barrier_reply(result),
        }
    }
}

/// Keep `key` = `value` in `map`, `held` counting the bytes of every map of the session:
/// a key of at most `KEYLEN_MAX` bytes, a value of at most `VALLEN_MAX`, and no more than
/// `PUTS_MAX_BYTES` in all.
fn keep(
    map: &mut BTreeMap<String, String>,
    held: &mut usize,
    key: &str,
    value: &str,
) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("no key");
    }
    if key.len() > KEYLEN_MAX || value.len() > VALLEN_MAX {
        return Err("key or value too long");
    }
    let old = map.get(key).map_or(0, |v| key.len() + v.len());
    let now = *held - old + key.len() + value.len();
    if now > PUTS_MAX_BYTES {
        return Err("too many puts");
    }
    map.insert(key.to_string(), value.to_string());
    *held = now;
    Ok(())
}

/// Serve the rank's PMI socket until it closes; the abort message, if the rank aborted.
pub async fn serve<F: Fencer>(
    hub: Arc<F>,
    stream: UnixStream,
    job: PmiJob,
    pgid: nix::unistd::Pid,
) -> Option<Abort> {
    let key = job.key;
    let fd = stream.as_raw_fd();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut session = Session::new(job);
    let mut spawn_lines = false;
    loop {
        let step = match session.wire() {
            Wire::V1 => match read_v1(&mut rd, &mut session, &mut spawn_lines, fd).await {
                Turn::Step(step) => step,
                Turn::Skip => continue,
                Turn::Closed => break,
            },
            Wire::V2 => match v2::read_frame(&mut rd, LINE_MAX).await {
                Ok(Some(frame)) => {
                    debug!(job_id = key.job_id, rank = key.rank, frame, "PMI-2 <");
                    session.handle_v2(&frame)
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(job_id = key.job_id, rank = key.rank, "PMI-2: {e}; closing");
                    break;
                }
            },
        };
        let reply = match step {
            Step::Reply(r) => r,
            Step::Finalize(r) => {
                let _ = send(&mut wr, session.wire(), &r).await;
                continue;
            }
            Step::Abort => {
                end_on_abort(&session, pgid);
                continue;
            }
            Step::Barrier => barrier(&*hub, &mut session).await,
        };
        // The answer to `init` still goes on the PMI-1 wire; the session's wire changes
        // after it.
        let wire = if reply.starts_with("cmd=response_to_init") {
            Wire::V1
        } else {
            session.wire()
        };
        if send(&mut wr, wire, &reply).await.is_err() {
            break;
        }
    }
    if let Some(a) = &session.aborted {
        info!(job_id = key.job_id, rank = key.rank, why = %a.what, "PMI session ended by abort");
    }
    session.aborted
}

/// What a read from the PMI-1 wire gives.
pub(crate) enum Turn {
    Step(Step),
    /// Nothing to answer yet (a line inside a multi-line spawn).
    Skip,
    Closed,
}

/// The next PMI-1 line, handled. `spawn_lines`: inside a multi-line spawn, whose lines are
/// skipped up to its end, then refused.
async fn read_v1(
    rd: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    session: &mut Session,
    spawn_lines: &mut bool,
    fd: i32,
) -> Turn {
    let key = session.job.key;
    let text = match read_line(rd).await {
        Ok(Some(t)) => t,
        Ok(None) => return Turn::Closed,
        Err(e) => {
            debug!(job_id = key.job_id, rank = key.rank, fd, "PMI socket: {e}");
            return Turn::Closed;
        }
    };
    debug!(job_id = key.job_id, rank = key.rank, line = text, "PMI <");
    on_v1_line(session, spawn_lines, &text)
}

/// One PMI-1 line (without its newline), handled.
pub(crate) fn on_v1_line(session: &mut Session, spawn_lines: &mut bool, text: &str) -> Turn {
    if *spawn_lines {
        if text == "endcmd" {
            *spawn_lines = false;
            return Turn::Step(Step::Reply(v1::SPAWN_REFUSAL.into()));
        }
        return Turn::Skip;
    }
    match parse(text) {
        Some(line) if line.cmd == "spawn" && text.starts_with("mcmd=") => {
            *spawn_lines = true;
            Turn::Skip
        }
        Some(line) => Turn::Step(session.handle(&line)),
        None => Turn::Step(Step::Reply(
            "cmd=error rc=-1 msg=not_a_PMI-1_command".into(),
        )),
    }
}

/// The rank aborted: MPICH waits for the process manager to end it; its exit is reported
/// with the code it gave (the master then ends the job's other ranks).
fn end_on_abort(session: &Session, pgid: nix::unistd::Pid) {
    let key = session.job.key;
    warn!(
        job_id = key.job_id,
        rank = key.rank,
        why = session
            .aborted
            .as_ref()
            .map(|a| a.what.as_str())
            .unwrap_or(""),
        "the rank aborted: ending it"
    );
    crate::ranks::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
}

/// A barrier: the job's fence through `hub`; the answer to send.
async fn barrier<F: Fencer>(hub: &F, session: &mut Session) -> String {
    let key = session.job.key;
    let (epoch, puts) = session.barrier_start();
    let puts = puts.clone();
    let started = std::time::Instant::now();
    let result = hub.fence(key, epoch, puts).await;
    if let Ok(space) = &result {
        debug!(
            job_id = key.job_id,
            rank = key.rank,
            epoch,
            keys = space.len(),
            bytes = space.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>(),
            us = started.elapsed().as_micros() as u64,
            "PMI barrier done"
        );
    }
    session.barrier_done(result)
}

/// One PMI-1 line without its newline (a NUL some clients send after it is dropped);
/// None at the end of the stream.
pub(crate) async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    rd: &mut R,
) -> std::io::Result<Option<String>> {
    let mut buf = String::new();
    if (&mut *rd).take(LINE_MAX as u64).read_line(&mut buf).await? == 0 {
        return Ok(None);
    }
    if !buf.ends_with('\n') && buf.len() >= LINE_MAX {
        return Err(std::io::Error::other(format!(
            "a line longer than {LINE_MAX} bytes"
        )));
    }
    Ok(Some(
        buf.trim_start_matches('\0')
            .trim_end_matches('\n')
            .to_string(),
    ))
}

async fn send(
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    wire: Wire,
    message: &str,
) -> std::io::Result<()> {
    let out = match wire {
        Wire::V1 => format!("{message}\n"),
        Wire::V2 => v2::frame(message),
    };
    wr.write_all(out.as_bytes()).await
}
